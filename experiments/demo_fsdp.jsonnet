// tango run experiments/demo_fsdp.jsonnet
// The main job (piqa_fsdp.jsonnet) on the embedded default: the synthetic task and a tiny GPT-2
// from a config, FairScale FSDP on 2 processes with every transformer block its own FSDP unit
// (the regexes of GPT-2's blocks; another family: its model and its blocks, e.g.
// `model=lib.models.tiny_llama` with `modules_to_wrap=lib.engines.llama_blocks`, or
// `modules_to_wrap` left out to wrap the model's own block classes), bf16 mixed precision.
// Needs no download and no GPU; `make run` runs this.
local lib = import 'lib/pipeline.libsonnet';

lib.pipeline(
  task=lib.tasks.synthetic,
  model=lib.models.tiny_gpt2,
  engine=lib.engines.fairscale(precision='bf16', modules_to_wrap=lib.engines.gpt2_blocks),
  training=lib.training.demo,
)
