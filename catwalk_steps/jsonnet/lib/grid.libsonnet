// What `lib.sweep` is given, checked and completed before it makes its cells: nothing given is
// dropped silently, and what would be is named in one line (`catwalk: ...` errors).

// Grid keys that are not training keys: `engine` and `model` name blocks of `engines` and
// `models`, `precision` sets the engine's, the adapter's keys set the model's `adapter`: every
// registered type's keys (catwalk_steps/adapters/: LoRA's r, alpha, dropout, target_modules;
// IA3's target_modules, feedforward_modules), which tests/test_sweep_grid.py holds to the types.
local block_keys = ['engine', 'model', 'precision'];
local adapter_keys = ['r', 'alpha', 'dropout', 'target_modules', 'feedforward_modules'];
local example = 'training=\'{"train_steps": 100}\'';
local json(value) = std.manifestJsonMinified(value);

// A grid key: one a sweep varies, with a list of one or more values (true, or an error).
local check_key(key, values, training_keys) =
  if !std.member(block_keys + adapter_keys + training_keys, key) then error (
    "catwalk: sweep grid key '%s': not a key a sweep varies (%s, or a training key: %s)"
    % [key, std.join(', ', block_keys + adapter_keys), std.join(', ', training_keys)]
  )
  else if !std.isArray(values) || std.length(values) == 0 then error (
    'catwalk: sweep grid key %s: give a list of one or more values (e.g. %s: [1, 2]), got %s'
    % [key, key, json(values)]
  )
  else true;

// `engine` (`model`) in the grid: its values must name blocks given; absent: every block
// given, when there are several.
local complete(grid, key, blocks, what) =
  local names = if std.isObject(blocks) then std.objectFields(blocks) else [];
  local unknown = if std.objectHas(grid, key)
  then [v for v in grid[key] if !(std.isString(v) && std.member(names, v))]
  else [];
  if std.length(names) == 0 then error (
    'catwalk: sweep %s: give at least one block, by name (e.g. %s)'
    % [what, if what == 'engines' then '{ddp: lib.engines.torch()}' else '{tiny: lib.models.tiny_gpt2}']
  )
  else if std.length(unknown) > 0 then error (
    'catwalk: sweep grid key %s: %s is not one of the %s given (%s)'
    % [key, json(unknown[0]), what, std.join(', ', names)]
  )
  else if !std.objectHas(grid, key) && std.length(names) > 1 then { [key]: names }
  else {};

// A key of `--ext-var training`: a training key the grid does not vary, of its default's type
// (true, or an error).
local check_training(key, value, training, grid) =
  local fields = std.objectFields(training);
  if !std.member(fields, key) then error (
    "catwalk: --ext-var training: '%s' is not a training key (%s)" % [key, std.join(', ', fields)]
  )
  else if std.objectHas(grid, key) then error (
    "catwalk: --ext-var training: '%s' is a key of the sweep's grid, which sets it for each cell; change the grid instead"
    % key
  )
  else if !(std.type(value) == std.type(training[key]) || training[key] == null
            || (key == 'max_length' && value == null)) then error (
    'catwalk: --ext-var training: %s: a %s like %s, got %s'
    % [key, std.type(training[key]), json(training[key]), json(value)]
  )
  else true;

// Parsed where jsonnet's error trace shows the variable's name (`field <training> access`
// just before `function <ext_json> call`): catwalk_startup/one_line.py reads it from there,
// as jsonnet's own message names no variable.
local ext_json(name, value) = { [name]: std.parseJson(value) }[name];

{
  block_keys: block_keys,
  adapter_keys: adapter_keys,

  // The training settings a file gives (`training` of lib.pipeline and lib.sweep) over the
  // defaults; a key the defaults lack would be read by no step: refused.
  training(defaults, given)::
    local unknown = [k for k in std.objectFields(given) if !std.objectHas(defaults, k)];
    if std.length(unknown) > 0 then error (
      "catwalk: training: '%s' is not a training key (%s)"
      % [unknown[0], std.join(', ', std.objectFields(defaults))]
    )
    else defaults + given,

  // The grid with every engine and every model given swept. Several `engines` and no `engine`
  // key: `engine` varies over all of them (the same for `models` and `model`); a key naming
  // some of them sweeps those. One block given needs no key, and the cells' names stay as
  // they were (no `engine=` in them).
  //   training: the sweep's training settings (their keys may be grid keys).
  completed(grid, engines, models, training)::
    // std.all evaluates every check (jsonnet is lazy: a field never read is never checked).
    local checked =
      if std.all([check_key(key, grid[key], std.objectFields(training)) for key in std.objectFields(grid)])
      then grid;
    checked + complete(checked, 'engine', engines, 'engines') + complete(checked, 'model', models, 'models'),

  // `--ext-var training='{"train_steps": 100}'` (declared empty in tango.yml): training keys
  // set for every cell of a sweep, over the file's `training` (a quick try of a long sweep).
  ext_training(training, grid)::
    local value = std.extVar('training');
    local parsed = if value == '' then {} else ext_json('training', value);
    if !std.isObject(parsed) then error (
      'catwalk: --ext-var training=%s: give a JSON object of training keys, e.g. %s' % [value, example]
    )
    else if std.all([check_training(key, parsed[key], training, grid) for key in std.objectFields(parsed)])
    then parsed,
}
