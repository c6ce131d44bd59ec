// tango run experiments/demo.jsonnet
// The embedded default: a synthetic task and a tiny GPT-2 built from a config, trained with DDP
// on 2 processes (CPU/gloo without GPUs). Needs no download; takes a few minutes on 2 cores.
local lib = import 'lib/pipeline.libsonnet';

lib.pipeline(
  task=lib.tasks.synthetic,
  model=lib.models.tiny_gpt2,
  engine=lib.engines.torch(),
  training=lib.training.demo,
)
