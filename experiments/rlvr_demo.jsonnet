// tango run experiments/rlvr_demo.jsonnet
// RLVR after SFT, offline, in one file: the demo's tiny GPT-2 learns most of the synthetic
// generative task's answers (a short SFT, FSDP2 on 2 processes: exact match ~0.8 on the held-out
// questions), then GRPO starts from the SFT model on the same questions' prompts: 8 completions
// sampled per prompt (temperature 1, each ending at the answer's newline), each rewarded by the
// task's own exact match (a verifiable reward: only the answer is checked), a group's rewards
// compared with each other. No answer is shown to it: the held-out exact match rises to >= 0.95
// (docs/results.md). The report shows the base, SFT and RLVR models on the held-out questions.
local lib = import 'lib/pipeline.libsonnet';

local model = lib.models.tiny_gpt2;
local engine = lib.engines.torch_fsdp();
local task = lib.tasks.synthetic_generative { sizes: { train: 1024, validation: 64 } };
local sft = lib.training.demo { train_steps: 80, validate_every: 80, lr: 3e-3 };
local rlvr = lib.training.demo {
  train_steps: 80,
  validate_every: 20,
  batch_size: 12,  // prompts per rank and step (24 a step: the task's 24 questions), G each
  lr: 1e-3,
  log_every: 5,  // completion records (work/completions/step_<n>.jsonl) at each logged step
};

lib.pipeline(task=task, model=model, engine=engine, training=sft, prefix='sft_')
+ lib.rlvr(
  task=task,
  model=model,
  engine=engine,
  training=rlvr,
  grpo={ num_generations: 8, max_completion_length: 8 },  // an answer and its newline: 6
  init_from=lib.ref('sft_trained'),
  data='sft_data',
)
+ {
  steps+: {
    report: {
      type: 'catwalk::report',
      title: 'Synthetic generative questions (held out): base, SFT, RLVR',
      metrics: {
        base: lib.ref('sft_eval_untrained'),
        sft: lib.ref('sft_eval_trained'),
        rlvr: lib.ref('rlvr_eval_after'),
      },
      runs: ['base', 'sft', 'rlvr'],  // the table's order (an object's keys come sorted)
    },
  },
}
