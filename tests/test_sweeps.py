"""Sweeps through `tango run`: one report over the grid (mean ± std over seeds, plots), every
cell cached on its own, cells side by side (`--parallelism`) or as separate jobs on one
workspace, and the same cell giving the same metrics in another workspace."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from . import commands
from .conftest import REPO, TANGO_ENV, run_tango, step_result, tango_command

pytestmark = [pytest.mark.slow]

SWEEP = REPO / "tests" / "fixtures" / "sweep_tiny.jsonnet"
CELLS = ["lr=0.001,seed=1", "lr=0.001,seed=2", "lr=0.003,seed=1", "lr=0.003,seed=2"]


def read_json(path: Path):
    return json.loads(path.read_text())


def trained_dirs(workspace: Path) -> set[str]:
    return {p.name for p in workspace.glob("cache/TrainRankClassifier-*")}


def unique_id(workspace: Path, run: str, step: str) -> str:
    from catwalk_steps.workspace.shared import SharedLocalWorkspace as LocalWorkspace

    return LocalWorkspace(workspace).registered_run(run).steps[step].unique_id


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory) -> tuple[Path, str]:
    workspace = tmp_path_factory.mktemp("sweep") / "workspace"
    output = run_tango(SWEEP, workspace, "first")
    return workspace, output


def test_the_report_summarises_each_configuration_over_its_seeds(sweep_run):
    workspace, output = sweep_run
    report = step_result(workspace, "first", "report")
    summaries = read_json(report / "report.json")["summaries"]
    for lr in ("0.001", "0.003"):
        accs = [
            read_json(
                step_result(workspace, "first", f"eval_trained,lr={lr},seed={seed}") / "data.json"
            )["acc"]
            for seed in (1, 2)
        ]
        summary = summaries[f"lr={lr}"]["acc"]
        assert summary["count"] == 2
        assert summary["mean"] == pytest.approx(statistics.fmean(accs), abs=1e-12)
        assert summary["std"] == pytest.approx(statistics.stdev(accs), abs=1e-12)
    assert summaries["model=untrained tiny"]["acc"]["count"] == 2
    lines = (report / "report.csv").read_text().splitlines()
    assert lines[0].startswith("configuration,acc_mean,acc_std,acc_count")
    assert len((report / "runs.csv").read_text().splitlines()) == 1 + 4 + 2
    # The table is printed at the end of the run, one row per configuration.
    assert "Tiny sweep" in output and "lr=0.001" in output and "±" in output


def test_the_plots_are_real_images(sweep_run):
    import matplotlib.image

    workspace, _ = sweep_run
    report = step_result(workspace, "first", "report")
    for name in ("validation_acc.png", "final_acc.png"):
        path = report / name
        assert path.stat().st_size > 10_000, name
        height, width, _ = matplotlib.image.imread(path).shape
        assert height >= 400 and width >= 600, name
    curves = read_json(report / "report.json")["histories"]
    assert [point["step"] for point in curves["lr=0.001,seed=1"]] == [4, 8]


def test_a_rerun_trains_nothing_and_a_new_seed_trains_only_its_cells(sweep_run):
    workspace, _ = sweep_run
    before = trained_dirs(workspace)
    # A cache hit, with the multicore executor: nothing trains, and the main process prints
    # the table (the executor's child processes would not).
    output = run_tango(SWEEP, workspace, "again", extra=("--parallelism", "2"))
    assert trained_dirs(workspace) == before
    assert 'Starting step "trained' not in output
    assert "lr=0.003" in output and "±" in output
    run_tango(SWEEP, workspace, "grown", extra=("--ext-var", "seeds=1,2,3"))
    new = trained_dirs(workspace) - before
    assert new == {
        unique_id(workspace, "grown", "trained,lr=0.001,seed=3"),
        unique_id(workspace, "grown", "trained,lr=0.003,seed=3"),
    }
    summaries = read_json(step_result(workspace, "grown", "report") / "report.json")["summaries"]
    assert summaries["lr=0.001"]["acc"]["count"] == 3


def reproducible(metrics: dict) -> dict:
    """An evaluation's metrics and its model's training history, without what measures the
    machine at the time (tokens/s, seconds per step, memory, wall time: the run card)."""
    history = metrics.get("training_history") or {"train": [], "validation": []}
    kept = ("step", "loss", "lr")
    return {
        **{key: metrics[key] for key in ("acc", "acc_norm", "n")},
        "train": [{key: e[key] for key in kept if key in e} for e in history["train"]],
        "validation": history["validation"],
        "trained_by": metrics.get("run_card", {}).get("step"),
    }


def test_one_cell_in_another_workspace_gives_identical_metrics(sweep_run, tmp_path):
    workspace, _ = sweep_run
    run_tango(SWEEP, tmp_path / "ws", "alone", extra=("--ext-var", "cell=0"))
    cell = "lr=0.001,seed=1"
    for step in (f"eval_trained,{cell}", "eval_untrained,model=tiny,seed=1"):
        here = read_json(step_result(tmp_path / "ws", "alone", step) / "data.json")
        there = read_json(step_result(workspace, "first", step) / "data.json")
        assert reproducible(here) == reproducible(there), step
    assert unique_id(tmp_path / "ws", "alone", f"trained,{cell}") == unique_id(
        workspace, "first", f"trained,{cell}"
    )


def test_two_jobs_on_one_workspace_share_steps_and_the_whole_sweep_then_trains_nothing(tmp_path):
    workspace = tmp_path / "ws"
    jobs = [
        commands.start(
            tango_command(
                SWEEP,
                workspace,
                f"job{cell}",
                None,
                "--ext-var",
                "seeds=1",
                "--ext-var",
                f"cell={cell}",
            ),
            tmp_path / f"job{cell}.log",
        )
        for cell in (0, 1)
    ]
    outputs = [job.communicate(timeout=300)[0] for job in jobs]
    for job, output in zip(jobs, outputs, strict=True):
        assert job.returncode == 0, output[-3000:]
    combined = "".join(outputs)
    assert combined.count('Finished step "data"') == 1  # computed once, waited for by the other
    assert len(trained_dirs(workspace)) == 2
    before = trained_dirs(workspace)
    output = run_tango(SWEEP, workspace, "whole", extra=("--ext-var", "seeds=1"))
    assert trained_dirs(workspace) == before
    assert 'Starting step "trained' not in output


def test_parallel_slots_compute_what_one_process_computes(sweep_run, tmp_path):
    """`--parallelism 2` in a fresh workspace, on one learning rate's two seeds (two cells, one
    per slot): every step computed by the warm slots gives the sequential run's metrics, each
    slot's workers take their share of the cores, and each trained model is evaluated in the
    slot that trained it (only the two untrained models are loaded)."""
    from catwalk_steps.distributed.devices import usable_cores

    workspace, _ = sweep_run
    env = {k: v for k, v in TANGO_ENV.items() if k != "OMP_NUM_THREADS"}  # the slots split
    extra = ("--parallelism", "2", "--ext-var", "lrs=0.001")
    output = run_tango(SWEEP, tmp_path / "ws", "parallel", extra=extra, env=env)
    for cell in CELLS[:2]:  # lr=0.001, seeds 1 and 2
        step = f"eval_trained,{cell}"
        here = read_json(step_result(tmp_path / "ws", "parallel", step) / "data.json")
        there = read_json(step_result(workspace, "first", step) / "data.json")
        # The cores split between the 2 slots; on more than 2 cores that is more threads than
        # the first run's one, which may change a float sum's last bits: the metrics compared.
        assert here["run_card"]["cpu_threads"] == max(1, usable_cores() // 2)
        same = reproducible if usable_cores() < 4 else (lambda m: {k: m[k] for k in ("acc", "n")})
        assert same(here) == same(there), step
    loaded = [line for line in output.splitlines() if "Loaded model" in line]
    assert len(loaded) == 2 and all("eval_untrained" in line for line in loaded), loaded
    assert "lr=0.001" in output and "±" in output  # the report, printed by the parent
