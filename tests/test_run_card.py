"""Run cards (versions, git state, host) and what reports make of training histories: each
run's mean tokens/s and peak memory, their sweep aggregates, and the card under the table."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from catwalk_steps.environment import environment, git_state, gpus
from catwalk_steps.reports import ReportFormat, build_report
from catwalk_steps.reports import run_card as card_module

from .conftest import REPO


def test_versions_git_and_host_are_this_process_s():
    env = environment()
    versions = env["versions"]
    assert versions["python"] == platform.python_version()
    for name in ("torch", "transformers", "ai2-tango", "catwalk_steps", "fairscale"):
        assert versions[name] == metadata.version(name)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True)
    assert env["git"]["commit"] == head.stdout.decode().strip()
    status = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True)
    assert env["git"]["dirty"] == bool(status.stdout.strip())
    assert env["host"]["cores"] == os.cpu_count()
    assert env["host"]["hostname"] == platform.node()


def test_a_dirty_tree_says_so(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "a.txt").write_text("2")
    assert git_state(tmp_path)["dirty"] is True
    assert git_state(tmp_path / "nowhere")["commit"] is None


def test_gpus_come_from_nvidia_smi_without_touching_cuda(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771'\necho 'NVIDIA H200, 143771'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpus() == [{"name": "NVIDIA H200", "memory_mib": 143771}] * 2
    text = card_module.describe_host({"hostname": "h", "cpu": "c", "cores": 8, "gpus": gpus()})
    assert text == "h: c, 8 cores; 2 x NVIDIA H200 (140 GiB)"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpus() == []


def history(speeds: list[float], peaks: list[dict]) -> dict:
    train = [
        {"step": i + 1, "loss": 1.0, "tokens_per_s": s, "s_per_step": 0.1, "peak_memory_mib": p}
        for i, (s, p) in enumerate(zip(speeds, peaks, strict=True))
    ]
    return {"train": train, "validation": [{"step": len(train), "acc": 0.5}]}


CARD = {
    "step": {"name": "trained", "unique_id": "TrainRankClassifier-002-abc"},
    "config": {"type": "catwalk::train", "train_steps": 3},
    "world_size": 2,
    "devices": "2 CPU processes",
    "cpu_threads": 1,
    "environment": {"versions": {"python": "3.11"}, "git": {}, "host": {}},
    "training": {"wall_time_s": 12.5, "s_per_step": 0.1},
    "trained": {"parameters": 136064, "trainable_parameters": 136064},
}


def test_the_report_shows_mean_tokens_per_s_peak_memory_and_the_run_card(tmp_path):
    peaks = [{"rank0": 400.0, "rank1": 390.0}, {"rank0": 420.0, "rank1": 431.5}]
    metrics = {
        "trained": {
            "acc": 0.9,
            "n": 10,
            "training_history": history([50.0, 1000.0, 1200.0], [*peaks, peaks[0]]),
            "run_card": CARD,
        },
        "untrained": {"acc": 0.25, "n": 10},
    }
    times = [{"name": "trained", "unique_id": "TrainRankClassifier-002-abc", "wall_time_s": 13.0}]
    report = build_report(metrics, environment=CARD["environment"], step_times=times)
    # The first logged step carries the warm-up: the mean is over the others.
    assert report.rows["trained"]["tokens/s"] == 1100.0
    assert report.rows["trained"]["peak MiB"] == 431.5
    assert "tokens/s" not in report.rows["untrained"]
    lines = report.markdown().splitlines()
    assert lines[:4] == [
        "| run | acc | n | peak MiB | tokens/s |",
        "|---|---:|---:|---:|---:|",
        "| trained | 0.9000 | 10 | 431.5 | 1100.0 |",
        "| untrained | 0.2500 | 10 |  |  |",
    ]
    card = lines.index("## Run card")
    assert card > 4  # under the table
    assert lines[card + 2] == (
        "Report made with python 3.11; code not in a git repository; "
        "host None: None, None cores; no GPU."
    )
    run = (
        "| trained | `TrainRankClassifier-002-abc` | all 136,064 parameters | 2 CPU processes x "
        "1 thread | as above | 2 | 12.5 |"
    )
    assert f"{run} 0.1000 |" in lines
    assert "| trained | `TrainRankClassifier-002-abc` | 13.0 |" in lines
    assert '  "train_steps": 3,' in lines  # the resolved config
    ReportFormat().write(report, tmp_path)
    again = ReportFormat().read(tmp_path)
    assert (again.run_cards, again.environment, again.step_times) == (
        {"trained": CARD},
        report.environment,
        times,
    )


def test_a_sweep_aggregates_tokens_per_s_and_peak_memory_per_configuration():
    runs = {
        (lr, seed): history([1.0, 100.0 * seed + lr], [{"rank0": 300.0 + seed}] * 2)
        for lr in (1, 2)
        for seed in (1, 2, 3)
    }
    metrics = {
        f"lr={lr},seed={seed}": {"acc": 0.5, "training_history": h}
        for (lr, seed), h in runs.items()
    }
    configs = {f"lr={lr},seed={seed}": {"lr": lr, "seed": seed} for lr, seed in runs}
    report = build_report(metrics, configs=configs)
    summary = report.summaries()["lr=2"]
    assert summary["tokens/s"].mean == statistics.fmean([102.0, 202.0, 302.0])
    assert summary["tokens/s"].std == pytest.approx(100.0)
    assert summary["peak MiB"].mean == 302.0 and summary["peak MiB"].count == 3
    header, body = report.table_rows()
    assert header == ["configuration", "seeds", "acc", "peak MiB", "tokens/s"]
    assert body[1] == ["lr=2", "3", "0.5000 ± 0.0000", "302.0 ± 1.0", "202.0 ± 100.0"]


def test_the_trained_model_directory_keeps_its_run_card(tmp_path):
    from catwalk_steps.checkpoints.weights import read_model_info, write_model_info

    write_model_info(tmp_path, "lm", {"train": [], "validation": []}, CARD)
    assert read_model_info(Path(tmp_path))["run_card"] == CARD
