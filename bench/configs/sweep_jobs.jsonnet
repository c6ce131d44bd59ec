// python bench/shared_workspace.py   (runs this file as a job array: one `--ext-var cell=i` per job)
// A sweep of 2 seeds x `--ext-var lrs=...` learning rates (8 cells by default) at the smallest
// useful size: the jobs of a round share the data step and one untrained evaluation per seed.
local lib = import 'lib/pipeline.libsonnet';

lib.sweep(
  task=lib.tasks.synthetic { sizes: { train: 16, validation: 8 } },
  grid={ seed: [1, 2], lr: lib.ext_numbers('lrs', [1e-3, 2e-3, 3e-3, 4e-3]) },
  engines={ ddp: lib.engines.torch() },
  models={ tiny: lib.models.tiny_gpt2 },
  training=lib.training.demo {
    device_count: 1,
    train_steps: 2,
    validate_every: 2,
    batch_size: 8,
    log_every: 1,
  },
  only=lib.ext_list('cell', []),
  title='Jobs sweep',
)
