// tango run experiments/piqa_torch.jsonnet
// GPT-2 fine-tuned on PIQA (from the Hugging Face hub) with DDP on 2 devices: the baseline for
// piqa_fsdp.jsonnet. PIQA from local files instead:
//   tango run experiments/piqa_torch.jsonnet -o '{"steps.data.task.data_dir": "/path/to/piqa"}'
local lib = import 'lib/pipeline.libsonnet';

lib.pipeline(
  task=lib.tasks.piqa,
  model=lib.models.gpt2,
  engine=lib.engines.torch(),
  training=lib.training.piqa,
)
