// tango run experiments/demo_fsdp.jsonnet
// The main job (piqa_fsdp.jsonnet) on the embedded default: the synthetic task and a tiny GPT-2
// from a config, FairScale FSDP on 2 processes with every transformer block its own FSDP unit
// (found by the model's class, no regex: another family is one line, e.g.
// `model=lib.models.tiny_llama`), bf16 mixed precision. Needs no download and no GPU;
// `make run` runs this.
local lib = import 'lib/pipeline.libsonnet';

lib.pipeline(
  task=lib.tasks.synthetic,
  model=lib.models.tiny_gpt2,
  engine=lib.engines.fairscale(precision='bf16'),
  training=lib.training.demo,
)
