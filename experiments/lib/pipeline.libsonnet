// The whole pipeline: load the task, evaluate the untrained model, train, evaluate the trained
// model, report both. Experiment files call `pipeline` with what differs.
local engines = import 'engines.libsonnet';
local models = import 'models.libsonnet';
local tasks = import 'tasks.libsonnet';

local training_defaults = {
  device_count: 2,  // processes (GPUs when there are enough, else CPU processes on gloo)
  seed: 1,
  lr: 1e-3,
  weight_decay: 0.0,
  batch_size: 16,  // instances per rank and step; each brings all its choices
  eval_batch_size: 32,
  max_length: 128,  // tokens of context + choice; contexts are cut on the left
  train_steps: 300,
  validate_every: 100,
  grad_accum: 1,
  log_every: 10,
};

{
  models: models,
  tasks: tasks,
  engines: engines,

  // Settings that experiments share; `training` in `pipeline` overrides any of them.
  training: {
    demo: training_defaults,
    piqa: training_defaults {
      lr: 2e-5,
      weight_decay: 0.01,
      batch_size: 8,
      max_length: 256,
      train_steps: 4000,  // two epochs of PIQA's 16,113 training instances on 2 devices
      validate_every: 500,
    },
  },

  pipeline(task, model, engine, training={}):: {
    local t = training_defaults + training,
    local collate = {
      type: 'catwalk::multiple_choice',
      tokenizer: models.tokenizer(model),
      max_length: t.max_length,
    },
    local data = { type: 'ref', ref: 'data' },

    steps: {
      data: { type: 'catwalk::load_task', task: task, splits: ['train', 'validation'] },
      trained: {
        type: 'catwalk::train',
        model: model,
        training_engine: engine {
          optimizer: { type: 'torch::AdamW', lr: t.lr, weight_decay: t.weight_decay },
        },
        dataset_dict: data,
        train_dataloader: {
          type: 'catwalk::sharded',
          batch_size: t.batch_size,
          shuffle: true,
          seed: t.seed,
          collate_fn: collate,
        },
        validation_dataloader: {
          type: 'catwalk::sharded',
          batch_size: t.eval_batch_size,
          collate_fn: collate,
        },
        device_count: t.device_count,
        seed: t.seed,
        train_steps: t.train_steps,
        validate_every: t.validate_every,
        checkpoint_every: t.validate_every,
        grad_accum: t.grad_accum,
        log_every: t.log_every,
      },
      eval_untrained: {
        type: 'catwalk::evaluate',
        model: model,
        dataset_dict: data,
        max_length: t.max_length,
      },
      eval_trained: self.eval_untrained { model: { type: 'ref', ref: 'trained' } },
      report: {
        type: 'catwalk::report',
        metrics: {
          untrained: { type: 'ref', ref: 'eval_untrained' },
          trained: { type: 'ref', ref: 'eval_trained' },
        },
      },
    },
  },
}
