"""GRPO's arithmetic equals TRL 1.16's GRPOTrainer (issue 59): advantages and reward metrics for
each `scale_rewards`; and for each loss type, num_iterations 1 and 2, beta 0 and 0.04, with and
without a LoRA adapter (the reference: the adapter off), the loss and metrics of both
micro-batches of an optimizer step and the gradient of every trained parameter, to 1e-5
relative. TRL's numbers come from tests/fixtures/grpo_parity.json, written by
tests/fixtures/make_grpo_fixture.py in a throwaway venv with TRL 1.16.0 (not installed here);
our side is the project's tiny GPT-2 built the same way, its packed shared-prompt scoring (each
prompt once, its G completions after it) and the pure functions of
`catwalk_steps.objectives.grpo_loss`."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

from catwalk_steps.adapters.registry import adapter_type
from catwalk_steps.objectives.grpo_loss import (
    group_advantages,
    grpo_loss,
    reward_metrics,
    token_entropy,
    weighted_rewards,
)
from catwalk_steps.scoring.packing import PackedRow, pack_rows
from catwalk_steps.scoring.shared_context import packed_log_probs

from .fixtures.make_dpo_fixture import build_model, key_of
from .fixtures.make_grpo_fixture import gradient_digest, perturb
from .test_dpo_parity import with_lora

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "grpo_parity.json").read_text())
G, STEPS = FIXTURE["num_generations"], FIXTURE["accumulation"]
PROMPTS, COMPLETIONS = FIXTURE["prompts"], FIXTURE["completions"]
WIDTH = FIXTURE["max_completion_length"]
REWARDS = torch.tensor(
    [[float("nan") if r is None else r for r in row] for row in FIXTURE["rewards"]]
)
RTOL = 1e-5


def close(got: float, want: float, scale: float = 0.0) -> bool:
    """Equal to `RTOL` relative to the value, or to `scale` (the size of the terms whose
    difference it is) where they cancel."""
    return abs(got - want) <= RTOL * max(abs(want), scale)


def completion_mask(rows: range) -> torch.Tensor:
    """[completions, WIDTH]: each completion's tokens, right-padded."""
    mask = torch.zeros(len(rows), WIDTH, dtype=torch.bool)
    for i, row in enumerate(rows):
        mask[i, : len(COMPLETIONS[row])] = True
    return mask


def truncated(rows: range) -> torch.Tensor:
    return torch.tensor([COMPLETIONS[row][-1] != FIXTURE["eos_token_id"] for row in rows])


def per_token_logps(lm, rows: range) -> torch.Tensor:
    """[completions, WIDTH]: each completion token's log-probability (0 at padding), from one
    packed row per prompt (the project's shared-context scoring)."""
    prompts = range(rows.start // G, rows.stop // G)
    packed = pack_rows(
        [
            PackedRow(
                tuple(PROMPTS[p]),
                tuple(tuple(COMPLETIONS[c]) for c in range(p * G, (p + 1) * G)),
                tuple(range((p - prompts.start) * G, (p - prompts.start + 1) * G)),
            )
            for p in prompts
        ],
        pad_id=0,
    )
    mask = completion_mask(rows)
    return torch.zeros(mask.shape).masked_scatter(mask, packed_log_probs(lm, packed))


def entropies(lm, rows: range) -> torch.Tensor:
    """[completions, WIDTH]: the entropy of the distribution each completion token is drawn
    from (a plain forward over prompt and completion: every prompt has the same length)."""
    length = len(PROMPTS[0])
    ids = torch.zeros(len(rows), length + WIDTH, dtype=torch.long)
    for i, row in enumerate(rows):
        sequence = PROMPTS[row // G] + COMPLETIONS[row]
        ids[i, : len(sequence)] = torch.tensor(sequence)
    with torch.no_grad():
        logits = lm(input_ids=ids).logits[:, length - 1 : length - 1 + WIDTH]
    return token_entropy(logits)


def models(lora: bool):
    """(policy, reference, the context the reference is scored in)."""
    policy = build_model(FIXTURE["seed"])
    if lora:
        policy = with_lora(policy)
        return policy, policy, adapter_type("lora").switched_off(policy)
    return policy, build_model(FIXTURE["seed"] + 1), contextlib.nullcontext()


def scored_when_sampled(case: dict, policy, reference, off):
    """(the reference's, the sampling policy's) log-probabilities of every completion, None
    where the case needs none, as TRL scores them when it samples; with num_iterations 2 the
    policy then moves, as its first update would move it."""
    settings, everything = case["settings"], range(len(COMPLETIONS))
    with torch.no_grad(), off:
        ref = per_token_logps(reference, everything) if settings["beta"] else None
    if settings["num_iterations"] == 1:
        return ref, None
    with torch.no_grad():
        old = per_token_logps(policy, everything)
    perturb(policy, case["lora"])
    return ref, old


def loss_settings(case: dict, mask: torch.Tensor) -> dict:
    settings = case["settings"]
    return dict(
        beta=settings["beta"],
        epsilon_low=FIXTURE["epsilon"],
        epsilon_high=FIXTURE["epsilon_high"],
        loss_type=settings["loss_type"],
        max_completion_length=WIDTH,
        dapo_tokens=mask.sum() / STEPS,  # the generation batch's tokens per micro-batch
        bias_correction_kl=case["bias_correction_kl"],
    )


def ours(case: dict) -> tuple[list[dict], list[list[float]]]:
    """Each micro-batch's loss, metrics and loss scale (the loop's division by its accumulation
    steps included, as TRL's); the digests of the gradients both accumulate."""
    policy, reference, off = models(case["lora"])
    ref, old = scored_when_sampled(case, policy, reference, off)
    everything = range(len(COMPLETIONS))
    advantages = group_advantages(weighted_rewards(REWARDS, FIXTURE["reward_weights"]), G, "group")
    mask = completion_mask(everything)
    if case["settings"]["mask_truncated_completions"]:
        mask &= ~truncated(everything)[:, None]
    size, results = len(COMPLETIONS) // STEPS, []
    policy.train()
    for rows in (range(step * size, (step + 1) * size) for step in range(STEPS)):
        part = slice(rows.start, rows.stop)
        given = dict(
            old_per_token_logps=None if old is None else old[part],
            ref_per_token_logps=None if ref is None else ref[part],
            completion_mask=mask[part],
            **loss_settings(case, mask),
        )
        logps = per_token_logps(policy, rows)
        loss, metrics = grpo_loss(
            logps, advantages=advantages[part], entropies=entropies(policy, rows), **given
        )
        (loss / STEPS).backward()  # the loop divides by its accumulation steps
        # The size of the loss's terms: the same loss with every advantage made positive.
        scale, _ = grpo_loss(logps.detach(), advantages=advantages[part].abs(), **given)
        result = {"loss": float(loss.detach()) / STEPS, "scale": abs(float(scale)) / STEPS}
        values = {name: float(value) for name, value in metrics.items()}
        results.append({**result, "metrics": values, "advantages": advantages[part]})
    grads = [
        gradient_digest(key_of(name), parameter.grad)
        for name, parameter in policy.named_parameters()
        if parameter.requires_grad
    ]
    return results, grads


@pytest.mark.parametrize("scale", list(FIXTURE["scale_rewards"]))
def test_advantages_and_reward_metrics_equal_trls(scale):
    trl = FIXTURE["scale_rewards"][scale]
    rewards = weighted_rewards(REWARDS, FIXTURE["reward_weights"])
    advantages = group_advantages(rewards, G, scale)
    for got, want in zip(advantages.tolist(), trl["advantages"], strict=True):
        assert close(got, want, scale=1.0), (got, want)
    metrics = reward_metrics(REWARDS, FIXTURE["reward_weights"], FIXTURE["reward_names"], G, scale)
    assert metrics.keys() == trl["metrics"].keys()
    for name, want in trl["metrics"].items():
        assert close(float(metrics[name]), want), (name, float(metrics[name]), want)


@pytest.mark.parametrize("name", list(FIXTURE["cases"]))
def test_loss_metrics_and_gradients_equal_trls(name):
    trl = FIXTURE["cases"][name]
    results, grads = ours(trl)
    advantages = torch.cat([result["advantages"] for result in results])
    for got, want in zip(advantages.tolist(), trl["advantages"], strict=True):
        assert close(got, want, scale=1.0), (got, want)
    for result, want in zip(results, trl["micro_batches"], strict=True):
        assert close(result["loss"], want["loss"], result["scale"]), (result["loss"], want["loss"])
        assert result["metrics"].keys() == want["metrics"].keys()
        for metric, value in want["metrics"].items():
            assert close(result["metrics"][metric], value), (
                metric,
                result["metrics"][metric],
                value,
            )
    kind = "lora" if trl["lora"] else "full"
    assert len(grads) == len(FIXTURE["parameters"][kind])
    for key, got, want in zip(FIXTURE["parameters"][kind], grads, trl["gradients"], strict=True):
        norm = want[0]
        assert norm > 0, key
        assert close(got[0], norm), (key, got[0], norm)
        for value in (1, 2):  # the sum and the probe: sums of terms of the gradient's size
            assert close(got[value], want[value], norm), (key, value, got[value], want[value])


def test_the_model_is_built_as_the_fixture_built_it():
    for name, seed in (("policy", FIXTURE["seed"]), ("reference", FIXTURE["seed"] + 1)):
        built = {key_of(n): float(p.detach().double().norm())
                 for n, p in build_model(seed).named_parameters()}  # fmt: skip
        # the fixture keeps 10 significant digits
        assert built == pytest.approx(FIXTURE["weights"][name], rel=1e-9)
