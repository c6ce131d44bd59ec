"""Trackers in experiment files: one line at graph build for what cannot work, no effect on a
step's identity, `wandb::log` run as ours, and `lib.pipeline` / `lib.sweep` taking callbacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from tango.integrations.torch import TrainCallback
from tango.step_graph import StepGraph

import catwalk_steps  # noqa: F401  (registers the components)
from catwalk_steps.checks import trackers as step_trackers
from catwalk_steps.checks.trackers import tracker_callbacks
from catwalk_steps.components import lazy_config
from catwalk_steps.errors import one_line
from catwalk_steps.training.trackers import TensorBoardTracker, WandbTracker

from . import training  # noqa: F401  (registers test::faults)
from .conftest import EXPERIMENTS, LIBRARY, experiment_params

DEMO, FSDP = EXPERIMENTS / "demo.jsonnet", EXPERIMENTS / "demo_fsdp.jsonnet"
WANDB = {"type": "wandb::log", "mode": "offline"}
TENSORBOARD = {"type": "catwalk::tensorboard"}


def graph(experiment: Path, callbacks: list[dict]) -> StepGraph:
    params = experiment_params(experiment, {"steps.trained.callbacks": callbacks})
    return StepGraph.from_params(params["steps"])


def failure(experiment: Path, callbacks: list[dict]) -> str:
    with pytest.raises(Exception) as error:
        graph(experiment, callbacks)
    line = one_line(error.value)
    assert line is not None and "\n" not in line, error.value
    return line


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    for name in ("WANDB_MODE", "WANDB_DISABLED", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


@pytest.fixture
def not_installed(monkeypatch):
    """`find_spec` as on a machine without wandb and tensorboard."""
    real = step_trackers.importlib.util.find_spec

    def find_spec(name, *args):
        return None if name in ("wandb", "tensorboard") else real(name, *args)

    monkeypatch.setattr(step_trackers.importlib.util, "find_spec", find_spec)


def test_wandb_not_installed_fails_at_graph_build_saying_so(not_installed):
    assert failure(DEMO, [WANDB]) == (
        "ConfigurationError: train.callbacks[0] (wandb::log): the wandb package is not "
        "installed; pip install 'catwalk_steps[trackers]' (or wandb)"
    )
    assert failure(DEMO, [WANDB | {"type": "catwalk::wandb"}]).startswith(
        "ConfigurationError: train.callbacks[0] (catwalk::wandb): the wandb package is not"
    )
    assert failure(DEMO, [TENSORBOARD]) == (
        "ConfigurationError: train.callbacks[0] (catwalk::tensorboard): the tensorboard package "
        "is not installed; pip install 'catwalk_steps[trackers]' (or tensorboard)"
    )


def test_wandb_online_without_an_api_key_fails_at_graph_build_saying_so(no_credentials):
    assert failure(DEMO, [{"type": "wandb::log", "project": "p"}]) == (
        "ConfigurationError: train.callbacks[0] (wandb::log): no W&B API key (WANDB_API_KEY, or "
        "`wandb login`) and not offline; log in, or set WANDB_MODE=offline (or mode: 'offline')"
    )
    graph(DEMO, [WANDB])  # offline needs no key


@pytest.mark.parametrize(
    ("experiment", "callbacks", "message"),
    [
        (
            DEMO,
            [TENSORBOARD, {"type": "catwalk::tensorboard", "log_dir": "/dev/null/tensorboard"}],
            "ConfigurationError: train.callbacks[1] (catwalk::tensorboard).log_dir: cannot write "
            "to /dev/null/tensorboard (/dev/null is not a directory)",
        ),
        (
            DEMO,
            [WANDB | {"projet": "p"}],
            "ConfigurationError: train.callbacks[0] (wandb::log).projet: WandbTracker has no such "
            "key; did you mean 'project'?",
        ),
        (
            DEMO,
            [WANDB | {"mode": "loud"}],
            "ConfigurationError: train.callbacks[0] (wandb::log).mode: online, offline or "
            "disabled, got 'loud'",
        ),
        (
            FSDP,
            [WANDB | {"watch_model": True}],
            "ConfigurationError: train.callbacks[0] (wandb::log).watch_model: not with "
            "catwalk::fairscale: each rank holds a shard of the parameters",
        ),
    ],
)
def test_a_tracker_that_cannot_work_is_one_line_at_graph_build(experiment, callbacks, message):
    assert failure(experiment, callbacks).startswith(message)


def test_trackers_are_not_part_of_the_step_id_other_callbacks_are(tmp_path):
    def trained_id(callbacks: list[dict] | None) -> str:
        overrides = {} if callbacks is None else {"steps.trained.callbacks": callbacks}
        params = experiment_params(DEMO, overrides)
        return StepGraph.from_params(params["steps"])["trained"].unique_id

    plain = trained_id(None)
    assert trained_id([WANDB, TENSORBOARD]) == plain
    assert trained_id([TENSORBOARD | {"log_dir": str(tmp_path)}]) == plain
    faults = {"type": "test::faults", "pid_dir": str(tmp_path)}
    assert trained_id([faults]) != plain
    assert trained_id([faults, WANDB]) == trained_id([faults])


def test_wandb_log_is_run_as_catwalk_wandb_and_keeps_its_keys():
    step = graph(DEMO, [WANDB | {"project": "p"}, TENSORBOARD])["trained"]
    assert step.kwargs["callbacks"] is None
    built = [
        lazy_config(lazy, TrainCallback, "callbacks")
        for lazy in tracker_callbacks(step.kwargs["trackers"])
    ]
    assert [kind for kind, _ in built] == [WandbTracker, TensorBoardTracker]
    assert built[0][1] == {"project": "p", "mode": "offline"}


def test_pipeline_and_sweep_take_callbacks(tmp_path):
    experiment = tmp_path / "tracked.jsonnet"
    lib = LIBRARY / "pipeline.libsonnet"
    experiment.write_text(
        f"local lib = import '{lib}';\n"
        "local trackers = [lib.trackers.wandb(mode='offline'), lib.trackers.tensorboard()];\n"
        "{ one: lib.pipeline(lib.tasks.synthetic, lib.models.tiny_gpt2, lib.engines.torch(),\n"
        "                    callbacks=trackers),\n"
        "  plain: lib.pipeline(lib.tasks.synthetic, lib.models.tiny_gpt2, lib.engines.torch()),\n"
        "  grid: lib.sweep(lib.tasks.synthetic, {seed: [1, 2]}, {ddp: lib.engines.torch()},\n"
        "                  {tiny: lib.models.tiny_gpt2}, callbacks=trackers) }\n"
    )
    params = experiment_params(experiment)
    expected = [
        {"type": "wandb::log", "project": "catwalk_steps", "tags": [], "mode": "offline"},
        {"type": "catwalk::tensorboard"},
    ]
    assert params["one"]["steps"]["trained"]["callbacks"] == expected
    assert "callbacks" not in params["plain"]["steps"]["trained"]
    cells = [step for name, step in params["grid"]["steps"].items() if name.startswith("trained")]
    assert len(cells) == 2 and all(cell["callbacks"] == expected for cell in cells)
