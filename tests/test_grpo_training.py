"""GRPO trains through `tango run` (issue 59): tests/fixtures/grpo_tiny.jsonnet, 3 steps on 2
gloo ranks under FSDP2, DDP and FairScale FSDP in one run (rollouts sampled through each
engine's root, rewards scored in the workers, TRL's metric names in the history, the same
numbers under every engine), a second run trains nothing; a run killed after a checkpoint and
rerun ends with the weights of one never interrupted, byte for byte (inside a generation batch
trained on twice, num_iterations 2: its ratio moves off 1); with beta and a LoRA adapter, the
KL to the base logged, and with beta and a full model the KL to its frozen reference; each
logged step's completions kept as records; bad rewards and references are one line
through `tango run`, before any step where they can be known then, from the workers where a
reward raises. (The step's pieces in-process: tests/test_grpo_step.py.)"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from . import commands
from .conftest import REPO, TINY_MODEL, killed_and_rerun, run_tango, step_result, tango_command
from .olmo_eval_reference import OLMO_TOKENIZER

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

FIXTURE = REPO / "tests" / "fixtures" / "grpo_tiny.jsonnet"
ENGINES = ("fsdp2", "ddp", "fairscale")
TRL_NAMES = (
    "loss",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "rewards/task_metric/mean",
    "rewards/regex_format/mean",
    "completions/mean_length",
    "completions/clipped_ratio",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "entropy",
)
COMPARED = ("reward", "rewards/regex_format/mean", "completions/mean_length", "entropy")
RTOL = 1e-4


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory) -> tuple[Path, str]:
    """The fixture run once, then again (its output)."""
    workspace = tmp_path_factory.mktemp("grpo") / "ws"
    run_tango(FIXTURE, workspace, "grpo")
    return workspace, run_tango(FIXTURE, workspace, "again")


def history(workspace: Path, step: str, run: str = "grpo") -> list[dict]:
    info = json.loads((step_result(workspace, run, step) / "catwalk_model.json").read_text())
    assert info["objective"] == "grpo"
    return info["metrics_history"]["train"]


def test_grpo_trains_3_steps_with_trl_s_metric_names_and_a_rerun_trains_nothing(grpo_run):
    workspace, again = grpo_run
    train = history(workspace, "fsdp2")
    assert [entry["step"] for entry in train] == [1, 2, 3]
    for entry in train:
        for name in TRL_NAMES:
            assert math.isfinite(entry[name]), (name, entry)
        assert entry["completions/mean_length"] <= 6  # max_completion_length
    assert train[-1]["reward"] != train[0]["reward"] or train[-1]["entropy"] != train[0]["entropy"]
    assert "Starting step" not in again, again[-3000:]


def test_ddp_and_fairscale_take_the_steps_fsdp2_takes(grpo_run):
    """The same prompts, the same draws, the same updates: every step's rewards, lengths and
    entropy (the policy after the steps before) equal under the three engines; the loss (about 0
    with μ = 1: the advantages' mean) to 1e-6 absolute."""
    workspace, _ = grpo_run
    runs = {engine: history(workspace, engine) for engine in ENGINES}
    for engine in ENGINES[1:]:
        for ours, theirs in zip(runs["fsdp2"], runs[engine], strict=True):
            for name in COMPARED:
                assert theirs[name] == pytest.approx(ours[name], rel=RTOL), (engine, name)
            assert theirs["loss"] == pytest.approx(ours["loss"], abs=1e-6), engine


def test_a_killed_grpo_run_rerun_ends_with_the_weights_of_an_uninterrupted_one(grpo_run, tmp_path):
    """The fixture's `resumed` (FSDP2, μ = 2), killed on rank 1 in its fourth step
    (after the step-3 checkpoint, inside the second generation batch), then rerun: it resumes
    at step 3 and trains on the generation batch the checkpoint holds what the fixture run
    did, to the same bytes."""
    workspace, _ = grpo_run
    faults = [{"type": "test::faults", "pid_dir": str(tmp_path / "pids"), "kill_step": 4}]
    overrides = {"steps.resumed.callbacks": faults}
    killed_and_rerun(FIXTURE, tmp_path / "ws", overrides, "resumed", resumed_at=3)
    ours = step_result(tmp_path / "ws", "rerun", "resumed") / "model.safetensors"
    whole = step_result(workspace, "grpo", "resumed") / "model.safetensors"
    assert ours.read_bytes() == whole.read_bytes()
    reran = history(tmp_path / "ws", "resumed", "rerun")
    assert [entry["reward"] for entry in reran] == [
        entry["reward"] for entry in history(workspace, "resumed")
    ]


def test_with_mu_2_a_generation_batch_is_trained_on_twice_its_ratio_moving_off_1(grpo_run):
    """`resumed` (μ = 2, epsilon 0, no dropout): each generation batch's metrics at both its
    steps (one batch, sampled once); at its first step the ratio to the sampling policy's
    log-probabilities is 1 (nothing clipped), at its second the policy has moved: off 1,
    clipped."""
    workspace, _ = grpo_run
    train = history(workspace, "resumed")
    assert [entry["step"] for entry in train] == [1, 2, 3, 4]
    for entry in train:
        for name in TRL_NAMES:
            assert math.isfinite(entry[name]), (name, entry)
    assert train[0]["reward"] == train[1]["reward"] and train[2]["reward"] == train[3]["reward"]
    fresh = ("reward", "completions/mean_length")  # the second batch sampled anew
    assert any(train[0][name] != train[2][name] for name in fresh)
    regions = [entry["clip_ratio/region_mean"] for entry in train]
    assert regions[0] == regions[2] == 0 and regions[1] > 0 and regions[3] > 0, regions


@pytest.mark.parametrize("run", ["lora", "full_ref"])
def test_with_beta_the_kl_to_the_reference_is_0_at_the_start_and_above_0_after(grpo_run, run):
    """beta 0.04: TRL's `kl` in each step's entry; 0 at the first step, where the policy is
    its reference, above 0 once it trained. `lora`: the reference is its base with the adapter
    off (a LoRA adapter starts as nothing). `full_ref` (no adapter, FSDP2): it starts from
    `fsdp2`'s model and names that step's model as its `reference` (loaded by each worker,
    frozen beside the policy, where it stays)."""
    workspace, _ = grpo_run
    train = history(workspace, run)
    assert [entry["step"] for entry in train] == [1, 2, 3]
    assert train[0]["kl"] == pytest.approx(0.0, abs=1e-7)
    for entry in train[1:]:
        assert math.isfinite(entry["kl"]) and entry["kl"] > 0, entry


def test_each_logged_step_keeps_its_completions_as_records(grpo_run):
    """`fsdp2`: `completions/step_<n>.jsonl` in the work directory for each logged step, 16
    records (2 ranks x 2 prompts x G = 4), each its prompt, text, each reward (the vowel
    reward as its pattern finds it in the text), their weighted sum and its advantage (a
    group's sum to 0); their mean reward is the history's. `resumed` (μ = 2): the steps that
    sample only."""
    workspace, _ = grpo_run
    work = step_result(workspace, "grpo", "fsdp2") / "work" / "completions"
    for entry in history(workspace, "fsdp2"):
        lines = (work / f"step_{entry['step']}.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert len(records) == 16 and {r["step"] for r in records} == {entry["step"]}
        assert [r["rank"] for r in records] == [0] * 8 + [1] * 8
        for r in records:
            assert r["prompt"] and set(r["rewards"]) == {"task_metric", "regex_format"}, r
            vowel = re.search("[aeiou]", r["completion"]) is not None
            assert r["rewards"]["regex_format"] == float(vowel), r
            assert r["reward"] == pytest.approx(sum(r["rewards"].values()))
            assert 1 <= r["tokens"] <= 6 and isinstance(r["truncated"], bool)
        for group in range(4):
            advantages = [r["advantage"] for r in records[group * 4 : group * 4 + 4]]
            assert sum(advantages) == pytest.approx(0.0, abs=1e-4)
        mean = sum(r["reward"] for r in records) / len(records)
        assert mean == pytest.approx(entry["reward"], rel=1e-6)
    resumed = step_result(workspace, "grpo", "resumed") / "work" / "completions"
    assert sorted(path.name for path in resumed.iterdir()) == ["step_1.jsonl", "step_3.jsonl"]


BAD = {
    "unknown_reward": (
        {"steps.fsdp2.model.grpo.reward_funcs": ["my_pkg::nothing"]},
        "model.grpo.reward_funcs[0]",
    ),
    "weights_of_another_length": (
        {"steps.fsdp2.model.grpo.reward_weights": [1.0, 2.0, 3.0]},
        "model.grpo.reward_weights: 3 weights for 2 rewards",
    ),
    "reference_of_no_use": (
        {"steps.fsdp2.reference": str(REPO)},
        "train.reference: nothing would use it: only objective 'grpo' with beta > 0 compares "
        "the model with a reference model, and the model's objective is 'grpo' with beta 0",
    ),
    "reference_with_adapter": (
        {"steps.lora.reference": str(REPO)},
        "train.reference: the model trains an adapter, and its reference is its base with the "
        "adapter off",
    ),
    "reference_of_another_tokenizer": (
        {"steps.full_ref.reference": {**TINY_MODEL, "tokenizer": OLMO_TOKENIZER}},
        f"train.reference: the reference's model block has tokenizer '{OLMO_TOKENIZER}', and "
        "the policy's is 'catwalk::byte_level'",
    ),
    "reference_block_with_adapter": (
        {"steps.full_ref.reference": {**TINY_MODEL, "adapter": {"type": "lora"}}},
        "train.reference.adapter: a reference is a whole frozen model",
    ),
}


def test_bad_rewards_are_one_line_through_tango_run_before_any_step(tmp_path):
    argvs = {
        name: tango_command(FIXTURE, tmp_path / name, name, o, "-s", "fsdp2")
        for name, (o, _) in BAD.items()
    }
    for name, (line, text) in commands.one_line_failures(argvs, tmp_path).items():
        assert BAD[name][1] in line, (name, line)
        assert 'Starting step "' not in text, name


def test_a_reward_that_raises_in_the_workers_is_one_line(tmp_path):
    raising = {"steps.fsdp2.model.grpo.reward_funcs": ["test::raising_reward"]}
    argv = tango_command(FIXTURE, tmp_path / "ws", "raises", raising, "-s", "fsdp2")
    [(line, _)] = commands.one_line_failures({"raises": argv}, tmp_path).values()
    assert (
        "reward 0 (test::raising_reward) on prompt 0, completion 0 raised ZeroDivisionError:"
        in line
    )
    assert "division by zero in my reward" in line
