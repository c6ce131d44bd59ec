"""RLVR through `tango run`: the demo (SFT, then GRPO from the SFT model rewarded by the task's
own exact match) raises the held-out exact match from the SFT model's (< 0.9) to >= 0.95 under
FSDP2 and under FairScale, and its report shows the base, SFT and RLVR models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import EXPERIMENTS, run_tango, step_result

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

DEMO = EXPERIMENTS / "rlvr_demo.jsonnet"
EXACT = "exact_match,remove_whitespace"
# The demo as shipped, its held-out questions fewer (32 of 64: the evaluations' cost).
SMALL_DEMO = {"steps.sft_data.task.sizes": {"train": 1024, "validation": 32}}


def metrics(workspace: Path, run: str, step: str) -> dict:
    return json.loads((step_result(workspace, run, step) / "data.json").read_text())


@pytest.fixture(scope="module")
def demo_workspace(tmp_path_factory) -> Path:
    """The demo with FSDP2 (its engine: all of it, reports too), then its GRPO step again with
    FairScale in the same workspace, as far as the evaluation after it (the SFT model and the
    data are cached: reused)."""
    workspace = tmp_path_factory.mktemp("rlvr_demo") / "ws"
    run_tango(DEMO, workspace, "fsdp2", SMALL_DEMO)
    fairscale = {  # validated (and checkpointed) at the end only
        **SMALL_DEMO,
        "steps.rlvr_trained.training_engine.type": "catwalk::fairscale",
        "steps.rlvr_trained.validate_every": 80,
        "steps.rlvr_trained.checkpoint_every": 80,
    }
    output = run_tango(DEMO, workspace, "fairscale", fairscale, extra=("-s", "rlvr_eval_after"))
    assert 'Starting step "sft_trained"' not in output  # cached: the same SFT model
    return workspace


@pytest.mark.parametrize("run", ["fsdp2", "fairscale"])
def test_the_demo_s_held_out_exact_match_rises_from_sft_s_to_at_least_0_95(demo_workspace, run):
    sft = metrics(demo_workspace, "fsdp2", "rlvr_eval_before")  # the SFT model's (one step)
    after = metrics(demo_workspace, run, "rlvr_eval_after")
    assert sft["n"] == after["n"] == 32
    assert 0.3 <= sft[EXACT] < 0.9, sft  # SFT leaves room
    assert after[EXACT] >= 0.95, after
    assert after[f"{EXACT.replace(',', '_stderr,')}"] is not None
    history = after["training_history"]
    assert history["validation"][-1][EXACT] == pytest.approx(after[EXACT])  # the loop's, too
    rewards = [entry["reward"] for entry in history["train"]]
    assert rewards[-1] > rewards[0] + 0.3, rewards  # TRL's `reward`: the task's exact match
    assert {"entropy", "completions/mean_length", "clip_ratio/region_mean"} <= history["train"][
        0
    ].keys()


def test_the_report_shows_base_sft_and_rlvr_on_the_held_out_questions(demo_workspace):
    from catwalk_steps.reports import ReportFormat

    report = ReportFormat().read(step_result(demo_workspace, "fsdp2", "report"))
    assert list(report.rows) == ["base", "sft", "rlvr"]
    scores = [report.rows[run][EXACT] for run in ("base", "sft", "rlvr")]
    assert scores[0] == 0.0 and scores[1] < 0.9 <= 0.95 <= scores[2], scores


def test_each_logged_step_keeps_its_completions_rewards_and_advantages(demo_workspace):
    work = step_result(demo_workspace, "fsdp2", "rlvr_trained") / "work" / "completions"
    rows = [json.loads(line) for line in (work / "step_80.jsonl").read_text().splitlines()]
    assert len(rows) == 24 * 8  # every rank's prompts, G each
    assert {row["rewards"]["task_metric"] for row in rows} <= {0.0, 1.0}
    assert sum(row["truncated"] for row in rows) < len(rows) / 4  # answers end at their newline
