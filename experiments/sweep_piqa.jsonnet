// tango run experiments/sweep_piqa.jsonnet
// GPT-2 on PIQA: DDP against FairScale FSDP (blocks wrapped), x learning rates x seeds, bf16,
// 2 devices per cell. Each cell is cached on its own config; `--ext-var seeds=1,2,3,4` adds the
// new seed's cells only. On a cluster, one job per cell (docs/sweeps.md):
//   tango run experiments/sweep_piqa.jsonnet --ext-var cell=$SLURM_ARRAY_TASK_ID
//   tango run experiments/sweep_piqa.jsonnet          # afterwards: the report over all cells
local lib = import 'lib/pipeline.libsonnet';

lib.sweep(
  task=lib.tasks.piqa,
  grid={
    engine: lib.ext_list('engines', ['ddp', 'fsdp']),
    lr: lib.ext_numbers('lrs', [1e-5, 2e-5]),
    seed: lib.ext_numbers('seeds', [1, 2, 3]),
  },
  engines={
    ddp: lib.engines.torch(precision='bf16'),
    fsdp: lib.engines.fairscale(precision='bf16', modules_to_wrap=lib.engines.gpt2_blocks),
  },
  models={ gpt2: lib.models.gpt2 },
  training=lib.training.piqa,
  only=lib.ext_list('cell', []),
  title='PIQA: DDP vs FairScale FSDP',
)
