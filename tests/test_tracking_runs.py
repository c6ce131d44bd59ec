"""W&B and TensorBoard on real training runs: every engine, one and two processes, rank 0 alone
writing; a 2-process FSDP2 demo through `tango run`, killed and resumed, whose W&B offline files
and TensorBoard event files hold every step once, equal to the metric history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tango.common import Lazy, Params
from tango.integrations.torch import TrainCallback

from catwalk_steps.launch import run_training

from .conftest import step_result
from .test_resume import faulty_demo, tango
from .test_trackers import tensorboard_scalars, wandb_history
from .training import BLOCKS, engine, history, job

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

TRACKERS = [{"type": "wandb::log", "mode": "offline"}, {"type": "catwalk::tensorboard"}]


@pytest.fixture(autouse=True)
def quiet_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")


def assert_trackers_hold_the_history(work_dir: Path, metrics: dict) -> None:
    """Every logged step once in W&B and TensorBoard, with the history's values."""
    steps = [entry["step"] for entry in metrics["train"]]
    validated = {entry["step"]: entry for entry in metrics["validation"]}
    rows = wandb_history(work_dir)
    assert [step for _, step, _ in rows] == steps
    assert len({name for name, _, _ in rows}) == 1  # one W&B run
    for (_, step, row), entry in zip(rows, metrics["train"], strict=True):
        assert row["train/loss"] == entry["loss"]
        assert row["train/lr"] == entry["lr"]
        assert row["train/tokens_per_s"] > 0 and row["train/s_per_step"] > 0
        if step in validated:
            assert row["validation/acc"] == validated[step]["acc"]
            assert row["validation/loss"] == validated[step]["loss"]
    scalars = tensorboard_scalars(work_dir / "tensorboard")
    assert [step for step, _ in scalars["train/loss"]] == steps
    expected = [pytest.approx(e["loss"], rel=1e-6) for e in metrics["train"]]
    assert [value for _, value in scalars["train/loss"]] == expected
    accuracies = [(s, pytest.approx(e["acc"], rel=1e-6)) for s, e in validated.items()]
    assert scalars["validation/acc"] == accuracies
    ranks = {tag.rsplit("/", 1)[1] for tag in scalars if tag.startswith("train/peak_memory")}
    assert len(ranks) == len(metrics["train"][0]["peak_memory_mib"])


@pytest.mark.parametrize(
    ("engine_type", "device_count"), [("catwalk::torch", 1), ("catwalk::fairscale", 2)]
)
def test_every_engine_logs_each_step_once_from_rank_0(tmp_path, engine_type, device_count):
    # Built in Python, not from a config: `wandb::log` is what the step runs as `catwalk::wandb`.
    specs = [{"type": "catwalk::wandb", "mode": "offline"}, {"type": "catwalk::tensorboard"}]
    callbacks = [Lazy(TrainCallback, Params(spec)) for spec in specs]
    block = engine(engine_type, modules_to_wrap=[BLOCKS] if device_count > 1 else [])
    run_training(job(tmp_path, device_count=device_count, engine_block=block, callbacks=callbacks))
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 1
    metrics = history(tmp_path)
    assert [e["step"] for e in metrics["train"]] == list(range(1, 9))
    assert_trackers_hold_the_history(tmp_path, metrics)


def test_a_killed_fsdp2_demo_resumes_its_wandb_run_and_tensorboard_without_gaps(tmp_path):
    pids, workspace = tmp_path / "pids", tmp_path / "ws"
    overrides = faulty_demo(pids, kill_step=6)  # rank 1 killed after checkpoint 4, before 8
    overrides["steps.trained.callbacks"] += TRACKERS
    overrides["steps.trained.training_engine"] = {
        "type": "catwalk::torch_fsdp",
        "precision": "fp32",
        "max_grad_norm": 1.0,
        "modules_to_wrap": [BLOCKS],
        "optimizer": {"type": "torch::AdamW", "lr": 1e-3},
    }
    first = tango(workspace, overrides, "first")
    output, _ = first.communicate(timeout=240)
    assert first.returncode != 0 and "rank 1 died" in output, output
    rerun = tango(workspace, overrides, "rerun")
    output, _ = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, output
    assert "Resumed from" in output and "at step 4" in output
    trained = step_result(workspace, "rerun", "trained")
    info = json.loads((trained / "catwalk_model.json").read_text())
    metrics = info["metrics_history"]
    assert [e["step"] for e in metrics["train"]] == list(range(1, 13))
    [work_dir] = (workspace / "cache").glob("TrainRankClassifier-*/work")
    assert len(list((work_dir / "wandb").glob("offline-run-*"))) == 2  # one per attempt
    assert_trackers_hold_the_history(work_dir, metrics)
    card = info["run_card"]
    assert card["world_size"] == 2 and card["step"]["unique_id"] == trained.name
    assert card["config"]["training_engine"]["type"] == "catwalk::torch_fsdp"
    report = (step_result(workspace, "rerun", "report") / "report.md").read_text()
    assert "## Run card" in report and trained.name in report
