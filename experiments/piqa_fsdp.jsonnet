// tango run experiments/piqa_fsdp.jsonnet
// The main job: GPT-2 fine-tuned on PIQA (from the Hugging Face hub) with FairScale FSDP on 2
// devices, every transformer block its own FSDP unit (`modules_to_wrap`: the regexes of GPT-2's
// blocks, which `with_wrapped_modules` applies; left out, the model's own block classes are
// wrapped, as in suite_demo.jsonnet), bf16 mixed precision (on GPUs older than Ampere:
// -o '{"steps.trained.training_engine.precision": "fp16"}'). Differs from piqa_torch.jsonnet
// only in the engine block. PIQA from local files instead:
//   tango run experiments/piqa_fsdp.jsonnet -o '{"steps.data.task.data_dir": "/path/to/piqa"}'
local lib = import 'lib/pipeline.libsonnet';

lib.pipeline(
  task=lib.tasks.piqa,
  model=lib.models.gpt2,
  engine=lib.engines.fairscale(precision='bf16', modules_to_wrap=lib.engines.gpt2_blocks),
  training=lib.training.piqa,
)
