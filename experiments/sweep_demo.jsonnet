// tango run experiments/sweep_demo.jsonnet
// A sweep on the embedded default (synthetic task, tiny GPT-2, no download): learning rate x
// seed, one process per cell so that `--parallelism 2` runs two cells side by side on 2 cores.
// Every cell is cached on its own config; the report gives mean ± std over seeds, and plots.
//   tango run experiments/sweep_demo.jsonnet --ext-var seeds=1,2,3     # adds one seed's cells
//   tango run experiments/sweep_demo.jsonnet --parallelism 2           # cells side by side
//   tango run experiments/sweep_demo.jsonnet --ext-var cell=0          # one cell (one job)
local lib = import 'lib/pipeline.libsonnet';

lib.sweep(
  task=lib.tasks.synthetic,
  grid={
    seed: lib.ext_numbers('seeds', [1, 2]),
    lr: lib.ext_numbers('lrs', [1e-3, 3e-3]),
  },
  engines={ ddp: lib.engines.torch() },
  models={ tiny: lib.models.tiny_gpt2 },
  training=lib.training.demo { device_count: 1, train_steps: 200 },
  only=lib.ext_list('cell', []),
  title='Demo sweep: learning rate x seed',
)
