"""What a sweep is given is swept or refused, never dropped (the library's grid.libsonnet):
every engine and model given makes cells (counted in the built graph), a grid key no cell
could use fails in one line, and `--ext-var training='{...}'` sets a training key for every
cell, a bad value naming the variable in one line through `tango run`."""

from __future__ import annotations

from pathlib import Path

import pytest
from tango.step_graph import StepGraph

import catwalk_steps  # noqa: F401  (registers the components)

from . import commands
from .conftest import EXPERIMENTS, evaluate_library, experiment_params, tango_command

ENGINES = "{ddp: lib.engines.torch(), fsdp2: lib.engines.torch_fsdp()}"
MODELS = "{gpt2: lib.models.tiny_gpt2, llama: lib.models.tiny_llama}"


def sweep_file(tmp_path: Path, grid: str, engines: str, models: str, training="{}") -> Path:
    path = tmp_path / "sweep.jsonnet"
    path.write_text(
        f"local lib = import 'lib/pipeline.libsonnet';\n"
        f"lib.sweep(task=lib.tasks.synthetic, grid={grid}, engines={engines}, models={models},\n"
        f"  training={training})\n"
    )
    return path


def trained_cells(path: Path, **ext_vars: str) -> dict[str, dict]:
    """The built graph's training steps (by name) and their configs."""
    steps = experiment_params(path, **ext_vars)["steps"]
    graph = StepGraph.from_params(dict(steps))
    return {name: steps[name] for name in graph if name.startswith("trained,")}


def test_every_engine_given_is_swept(tmp_path):
    cells = trained_cells(
        sweep_file(tmp_path, "{seed: [1]}", ENGINES, "{tiny: lib.models.tiny_gpt2}")
    )
    assert sorted(cells) == ["trained,engine=ddp,seed=1", "trained,engine=fsdp2,seed=1"]
    engines = {name: cell["training_engine"]["type"] for name, cell in cells.items()}
    assert engines == {
        "trained,engine=ddp,seed=1": "catwalk::torch",
        "trained,engine=fsdp2,seed=1": "catwalk::torch_fsdp",
    }


def test_every_model_given_is_swept_with_every_engine(tmp_path):
    cells = trained_cells(sweep_file(tmp_path, "{seed: [1, 2]}", ENGINES, MODELS))
    assert len(cells) == 2 * 2 * 2
    types = {cell["model"]["config"]["model_type"] for cell in cells.values()}
    assert types == {"gpt2", "llama"}
    assert "trained,engine=fsdp2,model=llama,seed=2" in cells


def test_a_grid_key_naming_some_blocks_sweeps_those(tmp_path):
    path = sweep_file(tmp_path, "{seed: [1], engine: ['fsdp2'], model: ['llama']}", ENGINES, MODELS)
    cells = trained_cells(path)
    assert list(cells) == ["trained,engine=fsdp2,model=llama,seed=1"]
    assert cells["trained,engine=fsdp2,model=llama,seed=1"]["training_engine"]["type"] == (
        "catwalk::torch_fsdp"
    )


def test_one_engine_and_one_model_keep_their_cell_names(tmp_path):
    """No `engine=`/`model=` in the names when there is nothing to choose: the demo sweeps'
    cells (and their cached results) stay as they were."""
    path = sweep_file(
        tmp_path,
        "{seed: [1], lr: [0.001]}",
        "{ddp: lib.engines.torch()}",
        "{tiny: lib.models.tiny_gpt2}",
    )
    assert list(trained_cells(path)) == ["trained,lr=0.001,seed=1"]


def test_the_grids_adapter_keys_are_every_registered_types_keys(tmp_path):
    """grid.libsonnet's adapter keys (what a sweep sets on the model's `adapter`) are the
    union of every adapter type's keys: a new type's keys are swept, not refused."""
    from catwalk_steps.adapters.registry import every_type

    listed = evaluate_library(tmp_path, "(import 'lib/grid.libsonnet').adapter_keys")
    assert sorted(listed) == sorted({key for kind in every_type() for key in kind.keys})


def test_a_sweep_sets_ia3_keys_on_the_models_adapter(tmp_path):
    """IA3's list-valued keys swept as any other: each cell's adapter block has its value."""
    targets = r"[['.*\\.c_attn'], ['.*\\.(c_attn|c_fc)']]"
    grid = f"{{seed: [1], target_modules: {targets}, feedforward_modules: [[]]}}"
    model = "{tiny: lib.models.tiny_gpt2 {adapter: {type: 'ia3'}}}"
    cells = trained_cells(sweep_file(tmp_path, grid, "{ddp: lib.engines.torch()}", model))
    adapters = sorted(
        (c["model"]["adapter"]["target_modules"], c["model"]["adapter"]["feedforward_modules"])
        for c in cells.values()
    )
    assert adapters == [([r".*\.(c_attn|c_fc)"], []), ([r".*\.c_attn"], [])]
    assert len(cells) == 2 and all("target_modules=" in name for name in cells)
    assert all(c["model"]["adapter"]["type"] == "ia3" for c in cells.values())


def test_the_training_ext_var_sets_a_key_for_every_cell():
    sweep = EXPERIMENTS / "sweep_demo.jsonnet"
    before = trained_cells(sweep)
    after = trained_cells(sweep, training='{"train_steps": 100, "validate_every": 50}')
    assert list(after) == list(before) and len(after) == 4
    for name, cell in after.items():
        assert (cell["train_steps"], cell["validate_every"]) == (100, 50), name
        # checkpoint_every follows validate_every, as in the training defaults
        assert cell["checkpoint_every"] == 50
        assert {k: v for k, v in cell.items() if k not in KEYS} == {
            k: v for k, v in before[name].items() if k not in KEYS
        }


KEYS = ("train_steps", "validate_every", "checkpoint_every")


def test_a_training_key_no_step_reads_is_one_line(tmp_path):
    """`training` of lib.pipeline and lib.sweep: a misspelt key would be read by no step."""
    from catwalk_steps.errors import one_line

    pipeline = tmp_path / "pipeline.jsonnet"
    pipeline.write_text(
        "local lib = import 'lib/pipeline.libsonnet';\n"
        "lib.pipeline(lib.tasks.synthetic, lib.models.tiny_gpt2, lib.engines.torch(),\n"
        "  training={train_step: 5})\n"
    )
    sweep = sweep_file(tmp_path, "{seed: [1]}", ENGINES, MODELS, "{train_step: 5}")
    for path in (pipeline, sweep):
        with pytest.raises(Exception) as failure:
            experiment_params(path)
        line = one_line(failure.value)
        assert line is not None and line.startswith(
            "ConfigurationError: training: 'train_step' is not a training key (batch_size, "
        ), line


# (grid, --ext-var training, the one line); the grid "-" : the file's `training` misspelt
CE = "ConfigurationError: "
EXAMPLE = """e.g. training='{"train_steps": 100}'"""
REFUSED = [
    ("-", "", CE + "training: 'train_step' is not a training key (batch_size, "),
    (
        "{seed: [1], engine: ['fsdp']}",
        "",
        CE + 'sweep grid key engine: "fsdp" is not one of the engines given (ddp, fsdp2)',
    ),
    (
        "{seed: [1], model: ['gpt3']}",
        "",
        CE + 'sweep grid key model: "gpt3" is not one of the models given (gpt2, llama)',
    ),
    (
        "{seed: [1], train_step: [100]}",
        "",
        CE + "sweep grid key 'train_step': not a key a sweep varies (engine, model, precision, "
        "r, alpha, dropout, target_modules, feedforward_modules, or a training key: batch_size, ",
    ),
    (
        "{seed: []}",
        "",
        CE + "sweep grid key seed: give a list of one or more values (e.g. seed: [1, 2]), got []",
    ),
    (
        "{seed: [1]}",
        '{"train_steps": 100',
        CE + "--ext-var training: not valid JSON (EOF while parsing an object at line 1 column "
        "19); give an object, " + EXAMPLE,
    ),
    (
        "{seed: [1]}",
        "100",
        CE + "--ext-var training=100: give a JSON object of training keys, " + EXAMPLE,
    ),
    (
        "{seed: [1]}",
        '{"train_step": 100}',
        CE + "--ext-var training: 'train_step' is not a training key (batch_size, ",
    ),
    (
        "{seed: [1]}",
        '{"train_steps": "100"}',
        CE + '--ext-var training: train_steps: a number like 200, got "100"',
    ),
    (
        "{seed: [1]}",
        '{"seed": 3}',
        CE + "--ext-var training: 'seed' is a key of the sweep's grid, which sets it for each "
        "cell; change the grid instead",
    ),
]


@pytest.mark.slow
def test_what_a_sweep_cannot_use_is_one_line_through_tango_run(tmp_path):
    started = []
    for index, (grid, training, _) in enumerate(REFUSED):
        case = tmp_path / str(index)
        case.mkdir()
        extra = ("--ext-var", f"training={training}") if training else ()
        path = (
            sweep_file(case, "{seed: [1]}", ENGINES, MODELS, "{train_step: 5}")
            if grid == "-"
            else sweep_file(case, grid, ENGINES, MODELS)
        )
        argv = tango_command(path, case / "ws", "bad", None, *extra)
        out = case / "out.txt"
        # The first fresh: the library's errors come before the package is imported (a
        # fresh interpreter shows they are one line: test_bad_inputs' BEFORE_IMPORT); the
        # others' messages through forked commands, as other commands run.
        started.append((commands.start(argv, out, fresh=index == 0), out))  # side by side
    for (command, out), (grid, training, message) in zip(started, REFUSED, strict=True):
        assert command.wait(120) != 0, (grid, training)
        lines = [line for line in out.read_text().splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], (grid, training, lines)
        assert not (out.parent / "ws" / "cache").exists()  # refused before any step


def test_the_docs_name_every_grid_key():
    from .conftest import REPO

    sweeps = (REPO / "docs" / "sweeps.md").read_text()
    for key in ("engine", "model", "precision", "seed", "lr", "r", "alpha", "dropout"):
        assert f"`{key}`" in sweeps, key
    assert """--ext-var training='{"train_steps": 100}'""" in sweeps


SWEEPS = sorted(EXPERIMENTS.glob("sweep_*.jsonnet"))


def cells_of(path: Path, **ext_vars: str) -> dict[str, dict]:
    """A shipped sweep's cells' training steps (`trained,...`: lib.sweep's and
    lib.preference_sweep's), as `tango run` builds them with these `--ext-var`s."""
    steps = experiment_params(path, **ext_vars)["steps"]
    return {name: step for name, step in steps.items() if name.startswith("trained,")}


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda path: path.stem)
def test_every_shipped_sweep_reads_training_and_cell_and_refuses_an_unknown_key(sweep):
    """The documented ext vars of every sweep (docs/sweeps.md's table): `training` sets a key of
    every cell (the DPO sweep trained 60 steps whatever it said), a key no step reads is one
    line as in lib.sweep, and `cell` keeps one cell."""
    from catwalk_steps.errors import one_line

    everyone = cells_of(sweep)
    quick = cells_of(sweep, training='{"train_steps": 30}')
    assert len(everyone) >= 2 and list(quick) == list(everyone)
    assert {cell["train_steps"] for cell in quick.values()} == {30}
    assert len(cells_of(sweep, cell="1")) == 1
    with pytest.raises(Exception) as failure:
        experiment_params(sweep, training='{"train_stepz": 3}')
    assert one_line(failure.value).startswith(
        CE + "--ext-var training: 'train_stepz' is not a training key (batch_size, "
    ), one_line(failure.value)
    with pytest.raises(Exception) as failure:
        experiment_params(sweep, cell="99")
    assert one_line(failure.value).startswith(CE + "--ext-var cell=99: no such cell; the grid has")


def test_the_dpo_sweep_s_shared_steps_score_as_its_cells_train():
    """`--ext-var training` reaches the reference step and the evaluation before DPO too: the
    reference cuts the pairs with the cells' max_length."""
    steps = experiment_params(EXPERIMENTS / "sweep_dpo.jsonnet", training='{"max_length": 96}')[
        "steps"
    ]
    assert steps["dpo_reference"]["max_length"] == 96
    assert steps["dpo_eval_before"]["max_length"] == 96
    for name, cell in cells_of(
        EXPERIMENTS / "sweep_dpo.jsonnet", training='{"max_length": 96}'
    ).items():
        assert cell["train_dataloader"]["collate_fn"]["max_length"] == 96, name


def test_the_docs_say_which_ext_vars_each_shipped_sweep_takes():
    """docs/sweeps.md has a row per shipped sweep naming every ext var the file reads, and
    `training` and `cell`, which every sweep reads."""
    import re

    from .conftest import REPO

    sweeps = (REPO / "docs" / "sweeps.md").read_text()
    for path in SWEEPS:
        row = next((line for line in sweeps.splitlines() if f"`{path.name}`" in line), None)
        assert row is not None and row.startswith("|"), path.name
        read = set(re.findall(r"lib\.ext_\w+\('(\w+)'", path.read_text())) | {"training", "cell"}
        assert {name for name in read if f"`{name}`" not in row} == set(), (path.name, row)


@pytest.mark.slow
def test_the_dpo_sweep_refuses_an_unknown_training_key_through_tango_run(tmp_path):
    argv = tango_command(
        EXPERIMENTS / "sweep_dpo.jsonnet",
        tmp_path / "ws",
        "bad",
        None,
        "--ext-var",
        'training={"train_stepz": 3}',
    )
    done = commands.run(argv, 120)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0
    assert len(lines) == 1 and (
        CE + "--ext-var training: 'train_stepz' is not a training key (batch_size, " in lines[0]
    ), lines
    assert not (tmp_path / "ws" / "cache").exists()
