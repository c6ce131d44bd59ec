"""Every experiment file evaluates, names only registered components, and says how to run it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tango import Step
from tango.common.params import Params

import catwalk_steps  # noqa: F401  (registers the components)

from .conftest import EXPERIMENTS

EXPERIMENT_FILES = sorted(EXPERIMENTS.glob("*.jsonnet"))


def test_there_are_experiments():
    assert {"demo.jsonnet", "piqa_torch.jsonnet"} <= {path.name for path in EXPERIMENT_FILES}


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: p.name)
def test_experiment_starts_with_the_command_that_runs_it(path: Path):
    first_line = path.read_text().splitlines()[0]
    assert first_line == f"// tango run experiments/{path.name}"


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: p.name)
def test_experiment_steps_are_registered_and_references_resolve(path: Path):
    steps = Params.from_file(path).as_dict()["steps"]
    for name, step in steps.items():
        assert Step.resolve_class_name(step["type"]), name
    for reference in find_references(steps):
        assert reference in steps, f"{path.name}: reference to unknown step {reference!r}"


def test_experiments_differ_only_where_they_say(tmp_path: Path):
    demo = Params.from_file(EXPERIMENTS / "demo.jsonnet").as_dict()["steps"]
    piqa = Params.from_file(EXPERIMENTS / "piqa_torch.jsonnet").as_dict()["steps"]
    assert demo.keys() == piqa.keys()
    assert demo["trained"]["training_engine"] == piqa["trained"]["training_engine"] | {
        "optimizer": demo["trained"]["training_engine"]["optimizer"]
    }


def find_references(value):
    if isinstance(value, dict):
        if value.get("type") == "ref":
            yield value["ref"]
        for item in value.values():
            yield from find_references(item)
    elif isinstance(value, list):
        for item in value:
            yield from find_references(item)
