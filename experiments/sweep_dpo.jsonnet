// tango run experiments/sweep_dpo.jsonnet
// A DPO sweep after SFT, offline: the demo's tiny GPT-2 learns the synthetic generative answers
// (SFT, once), then every cell of beta x learning rate x seed tunes it on the synthetic
// preference pairs with the SFT model as the reference. The reference's log-probabilities are
// one cached step (`dpo_reference`) that every cell reads: it runs once, whatever the grid.
// The report gives each configuration's held-out reward accuracy, mean ± std over seeds.
//   tango run experiments/sweep_dpo.jsonnet --ext-var betas=0.1,0.5 --ext-var seeds=1,2,3
//   tango run experiments/sweep_dpo.jsonnet --ext-var training='{"train_steps": 30}'  # every cell
//   tango run experiments/sweep_dpo.jsonnet --ext-var cell=0           # one cell (one job)
local lib = import 'lib/pipeline.libsonnet';

local model = lib.models.tiny_gpt2;
local engine = lib.engines.torch();
local sizes = { sizes: { train: 1024, validation: 64 } };

lib.pipeline(
  task=lib.tasks.synthetic_generative + sizes,
  model=model,
  engine=engine,
  training=lib.training.demo { device_count: 1, train_steps: 100, validate_every: 50, lr: 3e-3 },
  prefix='sft_',
) + lib.preference_sweep(
  task=lib.tasks.synthetic_preference + sizes,
  model=model,
  engine=engine,
  grid={
    beta: lib.ext_numbers('betas', [0.1, 0.5]),
    lr: lib.ext_numbers('lrs', [5e-4]),
    seed: lib.ext_numbers('seeds', [1, 2]),
  },
  training=lib.training.demo { device_count: 1, train_steps: 60, validate_every: 30 },
  dpo={ loss_type: 'sigmoid', rpo_alpha: 1.0 },
  reference=lib.ref('sft_trained'),
  init_from=lib.ref('sft_trained'),
  only=lib.ext_list('cell', []),
  title='DPO sweep: beta x learning rate x seed (held-out reward accuracy)',
)
