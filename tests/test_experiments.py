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


def steps_of(name: str) -> dict:
    return Params.from_file(EXPERIMENTS / name).as_dict()["steps"]


@pytest.mark.parametrize(
    ("ddp", "fsdp"),
    [("piqa_torch.jsonnet", "piqa_fsdp.jsonnet"), ("demo.jsonnet", "demo_fsdp.jsonnet")],
)
def test_fsdp_experiments_differ_from_ddp_only_in_the_engine_block(ddp: str, fsdp: str):
    a, b = steps_of(ddp), steps_of(fsdp)
    engine_a = a["trained"].pop("training_engine")
    engine_b = b["trained"].pop("training_engine")
    assert a == b
    assert engine_a["type"] == "catwalk::torch" and engine_b["type"] == "catwalk::fairscale"
    assert engine_b["modules_to_wrap"] == [r"transformer\.h\.[0-9]+"]
    assert engine_b["precision"] == "bf16"


def test_demo_and_piqa_differ_in_data_model_and_sizes_only():
    demo, piqa = steps_of("demo.jsonnet"), steps_of("piqa_torch.jsonnet")
    assert demo.keys() == piqa.keys()
    assert demo["trained"]["training_engine"]["type"] == piqa["trained"]["training_engine"]["type"]
    assert piqa["data"]["task"] == {"type": "catwalk::piqa"}
    assert piqa["trained"]["model"] == {"type": "catwalk::rank_classifier", "pretrained": "gpt2"}
    assert piqa["trained"]["train_dataloader"]["collate_fn"]["tokenizer"] == "gpt2"


def find_references(value):
    if isinstance(value, dict):
        if value.get("type") == "ref":
            yield value["ref"]
        for item in value.values():
            yield from find_references(item)
    elif isinstance(value, list):
        for item in value:
            yield from find_references(item)
