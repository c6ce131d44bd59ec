"""`--ext-var limit=N`: one switch shrinks any shipped experiment (lm-evaluation-harness's
`--limit`): every task cut to its first N instances, training shortened as the file says, other
steps than the full run's, and every report saying it was limited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tango.step_graph import StepGraph

import catwalk_steps  # noqa: F401  (registers the steps)
from catwalk_steps.tasks import Task, TaskDataError

from . import commands
from .conftest import EXPERIMENTS, QA_TASK, TANGO_ENV, experiment_params, tango_command

EXPERIMENT_FILES = sorted(EXPERIMENTS.glob("*.jsonnet"))
# The shipped experiments that need the Hugging Face hub (GPT-2's weights, PIQA, GSM8K's train
# split and Qwen2.5-0.5B-Instruct): offline here,
# their limited graphs are checked, not run.
NEED_THE_HUB = {
    "piqa_torch.jsonnet",
    "piqa_fsdp.jsonnet",
    "piqa_fsdp_suite.jsonnet",
    "sweep_piqa.jsonnet",
    "rlvr_gsm8k.jsonnet",
}
# Run by their own tests: the recipe limited, twice (its stages cached: tests/test_tulu_recipe.py,
# lib.rlvr under the limit); the RLVR demo as shipped (tests/test_rlvr_demo.py).
RUN_ELSEWHERE = {"tulu_recipe.jsonnet", "rlvr_demo.jsonnet"}
OFFLINE = [path for path in EXPERIMENT_FILES if path.name not in NEED_THE_HUB | RUN_ELSEWHERE]
# Run at 2 (2 training steps, 2 instances per task: the smallest every shipped file's steps
# take); the graphs above are checked at 8.
RUN_LIMIT = 2
LIMITED = f"Limited (--ext-var limit={RUN_LIMIT}): each task cut to its first {RUN_LIMIT} instances"


def tasks_in(step: dict) -> list:
    """The task blocks a step is given: its `task`, its in-loop `evaluate_tasks`, the
    `tasks` a curve over checkpoints scores."""
    found = [step["task"]] if "task" in step else []
    found += step.get("evaluate_tasks") or []
    return found + (step.get("tasks") or [] if step["type"] == "catwalk::checkpoints" else [])


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: p.name)
def test_every_task_is_cut_and_every_training_shortened(path: Path):
    full, limited = experiment_params(path)["steps"], experiment_params(path, limit="8")["steps"]
    assert full.keys() == limited.keys()
    tasks = [task for step in limited.values() for task in tasks_in(step)]
    assert tasks and all(t["type"] == "catwalk::limited" and t["limit"] == 8 for t in tasks)
    for name, step in limited.items():
        if step["type"] == "catwalk::train":
            assert step["train_steps"] == min(8, full[name]["train_steps"]), name
            assert step["checkpoint_every"] <= step["train_steps"]
            assert step["validate_every"] <= step["train_steps"]


@pytest.mark.parametrize("path", OFFLINE, ids=lambda p: p.name)
def test_a_limited_run_is_other_steps_than_the_full_one(path: Path):
    full = StepGraph.from_params(experiment_params(path)["steps"])
    limited = StepGraph.from_params(experiment_params(path, limit="8")["steps"])
    same = [name for name in full if full[name].unique_id == limited[name].unique_id]
    assert not same, f"{path.name}: {same} would take the full run's cached results"


def test_a_limit_that_is_no_number_is_one_line():
    with pytest.raises(Exception, match=r"--ext-var limit=ten: a number of instances per task > 0"):
        experiment_params(EXPERIMENTS / "demo.jsonnet", limit="ten")


def test_a_limited_load_reads_no_row_past_its_limit(tmp_path):
    """The load step stores a limited task's splits as it reads them (`stream`), each cut at
    the limit: a file is read no further (a bad line after the limit is never met)."""
    path = tmp_path / "train.jsonl"
    rows = [json.dumps({"q": f"question {i}", "a": f"answer {i}"}) for i in range(3)]
    path.write_text("\n".join([*rows, "{not json"]) + "\n")
    block = {**QA_TASK, "data_files": {"train": str(path), "validation": str(path)}}
    limited = Task.from_params({"type": "catwalk::limited", "task": dict(block), "limit": 3})
    assert [i.context for i in limited.load_split("train")][-1] == "Q: question 2\nA:"
    stored = {name: list(instances) for name, instances in limited.stream(["train", "validation"])}
    assert [len(instances) for instances in stored.values()] == [3, 3]
    past = Task.from_params({"type": "catwalk::limited", "task": dict(block), "limit": 4})
    with pytest.raises(TaskDataError, match=f"{path}:4: invalid JSON"):
        list(next(past.stream(["train"]))[1])


def test_a_limited_task_that_streams_trains_on_its_first_rows_alone(tmp_path):
    """`catwalk::limited` over a task that streams its training split: the stream is cut at
    the limit (each pass reads its first N rows), as a stored split is; a load step's smaller
    `max_instances` cuts it further."""
    from catwalk_steps.tasks.streamed import streamed_split

    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"q": f"q{i}", "a": f"a{i}"}) + "\n" for i in range(9)))
    block = {**QA_TASK, "data_files": {"train": str(path), "validation": str(path)}}
    block["streaming"] = True
    config = {"type": "catwalk::limited", "task": block, "limit": 4}
    limited = Task.from_params(json.loads(json.dumps(config)))
    split = streamed_split(limited, config, None, None, None)
    assert [row["q"] for row, _ in split.rows(0, False, 0, 0, 1)] == ["q0", "q1", "q2", "q3"]
    assert streamed_split(limited, config, None, 2, None).limit == 2


@pytest.mark.slow
@pytest.mark.distributed
def test_every_offline_experiment_runs_limited_and_its_reports_say_so(tmp_path):
    """Through `tango run`, two at a time, one workspace (steps the files share run once)."""
    workspace = tmp_path / "workspace"
    pending = list(OFFLINE)
    failures = []
    while pending:
        batch, pending = pending[:2], pending[2:]
        started = []
        for path in batch:
            argv = tango_command(
                path, workspace, path.stem, None, "--ext-var", f"limit={RUN_LIMIT}"
            )
            out = tmp_path / f"{path.stem}.txt"
            started.append((path, out, commands.start(argv, out, env=TANGO_ENV)))
        for path, out, command in started:
            code = command.wait(900)
            text = out.read_text()
            reports = text.count("report.md / report.csv")
            if code != 0 or reports == 0 or text.count(LIMITED) != reports:
                failures.append((path.name, code, reports, text.count(LIMITED), text[-2000:]))
    assert not failures, failures
