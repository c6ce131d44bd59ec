"""Which checkpoints `catwalk::checkpoints` scores, in which order, what identifies each one,
and the TensorBoard backfill (fast: no model; the demo through `tango run` is in
tests/test_checkpoints_demo.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps.checkpoints.content import (
    chosen_steps,
    coarse_to_fine,
    lineage_checkpoints,
    weights_content,
)
from catwalk_steps.checkpoints.layout import MODEL_FILES, checkpoint_dir
from catwalk_steps.checkpoints.manifest import mark_complete
from catwalk_steps.checks.checkpoints import check_schedule, chosen_of_directory
from catwalk_steps.training.trackers.backfill import backfill


def test_every_kth_the_last_n_and_a_list_choose_together():
    steps = [25 * i for i in range(1, 13)]
    assert chosen_steps(steps) == steps
    assert chosen_steps(steps, every=100) == [100, 200, 300]
    assert chosen_steps(steps, last=2) == [275, 300]
    assert chosen_steps(steps, every=100, last=1, steps=[25]) == [25, 100, 200, 300]


def test_coarse_to_fine_spans_the_run_first_and_takes_every_step_once():
    steps = list(range(25, 325, 25))
    order = coarse_to_fine(steps)
    assert sorted(order) == steps
    assert order[:3] == [300, 25, 150]  # the ends, then the middle
    assert coarse_to_fine([5]) == [5] and coarse_to_fine([5, 10]) == [10, 5]


def write_checkpoint(work_dir: Path, step: int, weights: bytes, trainer: bytes = b"t") -> Path:
    directory = checkpoint_dir(work_dir, step)
    directory.mkdir(parents=True)
    (directory / "model.pt").write_bytes(weights)
    (directory / "optimizer.pt").write_bytes(b"o" + trainer)
    (directory / "trainer.pt").write_bytes(trainer)
    mark_complete(directory, {"step": step, "model": {"class": "GPT2", "shapes": {}}})
    files = work_dir / "checkpoints" / MODEL_FILES
    files.mkdir(parents=True, exist_ok=True)
    (files / "config.json").write_text('{"n_layer": 2}')
    return directory


def test_the_identity_is_the_weights_not_the_path_nor_the_loop_state(tmp_path):
    one = write_checkpoint(tmp_path / "a", 25, b"weights")
    same = write_checkpoint(tmp_path / "b", 25, b"weights", trainer=b"another history")
    other = write_checkpoint(tmp_path / "c", 25, b"other weights")
    assert weights_content(one) == weights_content(same)
    assert weights_content(one) != weights_content(other)
    (tmp_path / "c" / "checkpoints" / MODEL_FILES / "config.json").write_text('{"n_layer": 3}')
    assert weights_content(other)["model_files"] != weights_content(one)["model_files"]


def test_a_run_trained_further_has_the_earlier_runs_checkpoints_before_its_own(tmp_path):
    earlier, later = tmp_path / "earlier", tmp_path / "later"
    for step in (25, 50, 75):
        write_checkpoint(earlier, step, b"w%d" % step)
    for step in (75, 100):
        write_checkpoint(later, step, b"x%d" % step)
    found = lineage_checkpoints(later, earlier)
    assert {s: p.parent.parent.name for s, p in found.items()} == {
        25: "earlier",
        50: "earlier",
        75: "later",
        100: "later",
    }
    # Resumed from one checkpoint: none after it.
    assert list(lineage_checkpoints(later, checkpoint_dir(earlier, 25))) == [25, 75, 100]


def test_a_directory_without_the_step_asked_for_is_one_line(tmp_path):
    write_checkpoint(tmp_path, 25, b"w")
    with pytest.raises(ConfigurationError, match=r"has no checkpoint at step 30 \(it has 25\)"):
        chosen_of_directory(tmp_path, None, None, [30], "checkpoints.run")
    with pytest.raises(ConfigurationError, match="does not exist"):
        chosen_of_directory(tmp_path / "nope", None, None, None, "checkpoints.run")
    with pytest.raises(ConfigurationError, match="every=7 chooses none"):
        chosen_of_directory(tmp_path, 7, None, None, "checkpoints.run")


class Train:
    name = "trained"

    def __init__(self, **kwargs):
        self.kwargs = kwargs


def test_a_training_step_must_write_and_keep_the_checkpoints_chosen():
    run = {"train_steps": 200, "checkpoint_every": 25}
    with pytest.raises(ConfigurationError, match="keeps only its newest 2 checkpoints"):
        check_schedule(Train(**run), 25, None, None)
    check_schedule(Train(**run, keep_last_checkpoints=8), 25, None, None)
    check_schedule(Train(**run), None, 2, None)  # the last two are kept
    with pytest.raises(ConfigurationError, match="writes no checkpoint at step 30"):
        check_schedule(Train(**run, keep_last_checkpoints=8), None, None, [30])


def curve(*points, metric="acc"):
    return {
        "metric": metric,
        "points": [{"step": s, "value": v, "stderr": e} for s, v, e in points],
    }


def test_tensorboard_gets_each_point_once_in_step_order_also_when_finer_ones_come_later(tmp_path):
    from .test_trackers import tensorboard_scalars

    assert backfill({"arc": curve((100, 0.5, 0.1), (200, 0.6, 0.1))}, tmp_path) == 4
    assert backfill({"arc": curve((100, 0.5, 0.1), (200, 0.6, 0.1))}, tmp_path) == 0
    assert backfill({"arc": curve((50, 0.4, None), (200, 0.6, 0.1))}, tmp_path) == 1
    scalars = tensorboard_scalars(tmp_path)
    assert scalars["checkpoints/arc/acc"] == [
        (50, pytest.approx(0.4)),
        (100, 0.5),
        (200, pytest.approx(0.6)),
    ]
    assert [step for step, _ in scalars["checkpoints/arc/acc_stderr"]] == [100, 200]
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
    assert len(json.loads((tmp_path / "checkpoint_scalars.json").read_text())) == 5


def test_wandb_gets_the_scores_after_the_runs_steps_against_their_own_step_metric(
    tmp_path, monkeypatch
):
    import wandb

    from catwalk_steps.training.trackers.wandb_backfill import STEP_METRIC, backfill_wandb

    from .test_trackers import wandb_history

    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = {"project": "p", "mode": "offline"}
    run = wandb.init(id="trainrun", dir=str(tmp_path), mode="offline", project="p")
    for step in range(1, 201):  # the training run's own rows
        run.log({"train/loss": 1.0}, step=step)
    run.finish()
    (tmp_path / "wandb_run.json").write_text('{"id": "trainrun"}')
    assert backfill_wandb({"arc": curve((100, 0.5, 0.1), (200, 0.6, 0.1))}, tmp_path, settings) == 2
    wandb.teardown()
    assert backfill_wandb({"arc": curve((100, 0.5, 0.1), (200, 0.6, 0.1))}, tmp_path, settings) == 0
    assert backfill_wandb({"arc": curve((50, 0.4, None))}, tmp_path, settings) == 1
    wandb.teardown()
    rows = [(step, row) for _, step, row in wandb_history(tmp_path) if STEP_METRIC in row]
    assert [step for step, _ in rows] == [201, 202, 203]  # after the run's: its order holds
    assert [(row[STEP_METRIC], row["checkpoints/arc/acc"]) for _, row in rows] == [
        (100, 0.5),
        (200, 0.6),
        (50, 0.4),
    ]
    assert rows[0][1]["checkpoints/arc/acc_stderr"] == 0.1
    assert ("checkpoints/*", STEP_METRIC) in wandb_metric_definitions(tmp_path)


def wandb_metric_definitions(work_dir: Path) -> set[tuple[str, str]]:
    """(metric or glob, its step metric) of every offline segment's `define_metric`."""
    from .test_trackers import wandb_records

    return {
        (record.metric.glob_name or record.metric.name, record.metric.step_metric)
        for _, record in wandb_records(work_dir, "metric")
    }


def test_the_curves_carry_each_tasks_standard_error_and_the_plot_draws_its_band(tmp_path):
    from catwalk_steps.reports.checkpoint_curves import (
        build_checkpoint_report,
        plot_checkpoint_curves,
    )

    def result(acc, stderr=None):
        scored = {"acc": acc, "acc_norm": acc, "n": 10, "task": "arc_easy"}
        return scored if stderr is None else {**scored, "acc_stderr": stderr}

    report = build_checkpoint_report(
        {200: {"arc_easy": result(0.6, 0.02)}, 100: {"arc_easy": result(0.5, 0.03)}}, "acc", "T"
    )
    assert list(report.rows) == ["step 100", "step 200"]
    [curve] = report.details["checkpoints"].values()
    assert curve["points"] == [
        {"step": 100, "value": 0.5, "stderr": 0.03},
        {"step": 200, "value": 0.6, "stderr": 0.02},
    ]
    path = tmp_path / "curves.png"
    assert plot_checkpoint_curves(report.details["checkpoints"], "T", path) and path.is_file()
    without = build_checkpoint_report({100: {"arc_easy": result(0.5)}}, "acc", "T")
    assert without.details["checkpoints"]["arc_easy"]["points"][0]["stderr"] is None


def test_the_same_tensors_saved_twice_are_the_same_content(tmp_path):
    import torch

    from catwalk_steps.checkpoints.manifest import read_manifest

    tensors = {"w": torch.arange(6.0)}
    ids = []
    for run, values in (("a", tensors), ("b", tensors), ("c", {"w": torch.arange(6.0) + 1})):
        directory = checkpoint_dir(tmp_path / run, 25)
        directory.mkdir(parents=True)
        temporary = directory / f".model.pt.{run}.tmp"  # as written: its name in the archive
        torch.save(values, temporary)
        temporary.rename(directory / "model.pt")
        mark_complete(directory, {"step": 25})
        ids.append((read_manifest(directory)["files"]["model.pt"], weights_content(directory)))
    (a, content_a), (b, content_b), (_, content_c) = ids
    assert a["sha256"] != b["sha256"]  # the temporary file's name (and, in another process,
    # torch.save's random serialization id)
    assert a["tensors"] == b["tensors"] and content_a == content_b
    assert content_c != content_a
    # A manifest whose digest names other tensors is refused when the checkpoint is scored.
    from catwalk_steps.checkpoints.content import tensors_problem

    directory = checkpoint_dir(tmp_path / "a", 25)
    assert tensors_problem(directory) is None
    manifest = read_manifest(directory)
    manifest["files"]["model.pt"]["tensors"] = ids[2][0]["tensors"]
    (directory / "COMPLETE.json").write_text(json.dumps(manifest))
    assert "its tensors differ from its manifest's digest" in tensors_problem(directory)


def test_a_filtered_metrics_standard_error_is_found_under_lm_evals_key():
    from catwalk_steps.reports.checkpoint_curves import stderr_key

    assert stderr_key("acc") == "acc_stderr"
    assert stderr_key("exact_match,remove_whitespace") == "exact_match_stderr,remove_whitespace"
