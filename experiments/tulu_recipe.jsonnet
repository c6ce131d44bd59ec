// tango run experiments/tulu_recipe.jsonnet
// The open post-training recipe (Tülu 3, OLMo 2 Instruct) in one file, offline, on the embedded
// defaults: SFT -> DPO -> RLVR, each stage starting from the one before and each a cached step,
// so a second run trains nothing and changing a later stage retrains only it. The demo's tiny
// GPT-2 under FSDP2 on 2 processes:
// 1. SFT on the synthetic generative task's answers (exact match on the held-out questions);
// 2. DPO from the SFT model on the same questions as preference pairs (the right answer chosen,
//    a wrong one rejected), the SFT model its reference (one cached step of log-probabilities);
// 3. RLVR (GRPO) from the DPO model on the generative task's prompts, rewarded by its exact
//    match, with Tülu 3's KL term to the DPO model (a frozen copy beside the policy).
// The report: exact match of the base, SFT, DPO and RLVR models on the held-out questions.
local lib = import 'lib/pipeline.libsonnet';

local model = lib.models.tiny_gpt2;
local engine = lib.engines.torch_fsdp();
local generative = lib.tasks.synthetic_generative { sizes: { train: 1024, validation: 64 } };
local preference = lib.tasks.synthetic_preference { sizes: { train: 1024, validation: 64 } };

lib.pipeline(
  task=generative,
  model=model,
  engine=engine,
  training=lib.training.demo { train_steps: 80, validate_every: 80, lr: 3e-3 },
  prefix='sft_',
)
+ lib.preference(
  task=preference,
  model=model,
  engine=engine,
  training=lib.training.demo { train_steps: 40, validate_every: 40, lr: 5e-4 },
  dpo={ beta: 0.1, loss_type: 'sigmoid', rpo_alpha: 1.0 },
  reference=lib.ref('sft_trained'),
  init_from=lib.ref('sft_trained'),
  prefix='dpo_',
)
+ lib.rlvr(
  task=generative,
  model=model,
  engine=engine,
  training=lib.training.demo {
    train_steps: 80,
    validate_every: 40,
    batch_size: 12,  // prompts per rank and step, 8 completions each
    lr: 1e-3,
    log_every: 10,
  },
  // beta: the KL term to the reference, the DPO model (the policy's start: `init_from`'s).
  grpo={ num_generations: 8, max_completion_length: 8, beta: 0.04 },
  init_from=lib.ref('dpo_trained'),
  data='sft_data',
  prefix='rlvr_',
)
+ {
  steps+: {
    // Each stage's model on the held-out generative questions (the SFT stage's own evaluations
    // give base and SFT; RLVR's "before" is the DPO model's).
    report: {
      type: 'catwalk::report',
      title: 'Tülu-style recipe on the synthetic questions (held out): base, SFT, DPO, RLVR',
      metrics: {
        base: lib.ref('sft_eval_untrained'),
        sft: lib.ref('sft_eval_trained'),
        dpo: lib.ref('rlvr_eval_before'),
        rlvr: lib.ref('rlvr_eval_after'),
      },
      runs: ['base', 'sft', 'dpo', 'rlvr'],  // the table's order
    },
  },
}
