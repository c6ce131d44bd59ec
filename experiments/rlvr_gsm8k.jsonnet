// tango run experiments/rlvr_gsm8k.jsonnet
// RLVR on GSM8K as GRPO recipes run it (needs the Hugging Face hub and a GPU; not run here):
// Qwen2.5-0.5B-Instruct trained by GRPO on the prompts of GSM8K's train split (7473
// questions, from the hub: openai/gsm8k 'main'), its exact match scored before and after on the
// held-out test split (1319 questions): lm-evaluation-harness 0.4.13's gsm8k, 5-shot (examples
// from the train split), its strict-match filter reading the '#### <number>' answer line. No
// answer is shown to the model; each completion is rewarded by:
//   - the task's own exact match (`catwalk::task_metric`: its filters and metric, what the
//     evaluation scores), weight 1.0, and
//   - a format reward (the completion ends with GSM8K's '#### <number>' line), weight 0.1: a
//     small signal towards the line strict-match reads while a group has no right answer, too
//     small for a well-formatted wrong answer to outweigh a right one (1.0 + 0.1 vs 0.1).
// FSDP2 (bf16) on 2 GPUs; on 8: -o '{"steps.rlvr_trained.device_count": 8}'. What it reaches is
// not measured (docs/training/grpo.md#gsm8k); rlvr_gsm8k_offline.jsonnet is the same experiment
// offline, as a smoke run.
local lib = import 'lib/pipeline.libsonnet';

local rlvr = lib.training.demo {
  lr: 1e-6,  // TRL's GRPOConfig default
  batch_size: 2,  // prompts per rank and micro-batch, each with its G completions
  grad_accum: 4,  // 8 prompts per rank and step: 16 on 2 GPUs, 128 completions
  eval_batch_size: 32,
  max_length: 2048,  // a 5-shot prompt (~1000 tokens) and the 256 generated
  train_steps: 467,  // one pass over the 7473 training questions at 16 prompts a step
  // Validated once, at the end: validating on the test split along the way would choose the
  // kept checkpoint by its test score.
  validate_every: 467,
  checkpoint_every: 467,
  log_every: 10,  // completion records (work/completions/step_<n>.jsonl) at each logged step
};

lib.rlvr(
  task={ name: 'gsm8k' },
  model=lib.models.qwen2_5_0_5b_instruct,
  engine=lib.engines.torch_fsdp(precision='bf16'),
  training=rlvr,
  grpo={
    num_generations: 8,  // G
    max_completion_length: 256,  // the task's max_gen_toks: what evaluation generates
    temperature: 1.0,
    // No KL term, TRL's default (beta > 0 would score a frozen copy of the starting model
    // beside the policy, as tulu_recipe.jsonnet's RLVR stage does).
    beta: 0.0,
    reward_funcs: [lib.rewards.task_metric(), lib.rewards.gsm8k_format],
    reward_weights: [1.0, 0.1],
  },
  held_out='test',  // GSM8K has train and test, no validation split
)
