// tango run experiments/sweep_lora.jsonnet
// A LoRA sweep on the embedded default (synthetic task, tiny GPT-2 built from a config, no
// download): rank x alpha x learning rate, one process per cell. Only the adapters train; the
// untrained base (the model without its adapter) is evaluated once for every cell. The report
// gives each cell's accuracy and what it trained (run cards: LoRA r, alpha, trainable count).
//   tango run experiments/sweep_lora.jsonnet --ext-var lrs=0.005,0.01   # other learning rates
//   tango run experiments/sweep_lora.jsonnet --ext-var cell=0           # one cell (one job)
local lib = import 'lib/pipeline.libsonnet';

lib.sweep(
  task=lib.tasks.synthetic,
  grid={
    r: lib.ext_numbers('ranks', [4, 8]),
    alpha: lib.ext_numbers('alphas', [16]),
    lr: lib.ext_numbers('lrs', [1e-2]),
  },
  engines={ ddp: lib.engines.torch() },
  models={ tiny: lib.models.tiny_gpt2 { adapter: lib.models.lora(targets=lib.models.gpt2_projections) } },
  training=lib.training.lora_demo { device_count: 1 },
  only=lib.ext_list('cell', []),
  title='LoRA sweep: rank x alpha x learning rate',
)
