// python bench/sweep_parallel.py   (runs this file with and without --parallelism 2)
// sweep_demo's 4 cells (2 seeds x 2 learning rates, one process each), each training long
// enough to take about a minute on its own (`--ext-var steps=N`), validating rarely: the
// sweep that `--parallelism` is for.
local lib = import 'lib/pipeline.libsonnet';
local steps = lib.ext_numbers('steps', [4500])[0];

lib.sweep(
  task=lib.tasks.synthetic,
  grid={ seed: [1, 2], lr: [1e-3, 3e-3] },
  engines={ ddp: lib.engines.torch() },
  models={ tiny: lib.models.tiny_gpt2 },
  training=lib.training.demo {
    device_count: 1,
    train_steps: steps,
    validate_every: steps,
    checkpoint_every: steps,
  },
  only=lib.ext_list('cell', []),
  title='Minute cells',
)
