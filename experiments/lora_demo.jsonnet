// tango run experiments/lora_demo.jsonnet
// The demo (synthetic task, tiny GPT-2 built from a config, DDP on 2 processes) training a LoRA
// adapter instead of the whole model: only the adapter's weights train, the base's stay as
// they were drawn. The trained step's result holds the merged model and, in `adapter/`, the
// peft adapter directory. Needs no download.
local lib = import 'lib/pipeline.libsonnet';

lib.pipeline(
  task=lib.tasks.synthetic,
  model=lib.models.tiny_gpt2 { adapter: lib.models.lora(targets=lib.models.gpt2_projections) },
  engine=lib.engines.torch(),
  training=lib.training.lora_demo,
)
