"""DPO equals TRL's DPOTrainer: loss, rewards, margins, accuracies, logps and the gradient of every
trained parameter, to 1e-5 relative, for sigmoid, ipo, hinge, robust (label smoothing) and RPO,
with and without a LoRA adapter (the reference: the adapter off), from the packed pair and from
TRL's two rows. TRL's numbers come from tests/fixtures/dpo_parity.json, written by
tests/fixtures/make_dpo_fixture.py in a throwaway venv with TRL 1.16.0 (not installed here): the
model is built here the same way, from the same config and seed."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

from catwalk_steps.adapters.registry import adapter_type
from catwalk_steps.objectives.dpo_loss import preference_loss
from catwalk_steps.scoring.preference import (
    PreferencePair,
    answer_logps,
    concatenated_pairs,
    pack_pairs,
)

from .fixtures.make_dpo_fixture import GATHERED, build_model, digest, key_of, set_lora_weights

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "dpo_parity.json").read_text())
PAIRS = [PreferencePair(p["prompt"], p["chosen"], p["rejected"]) for p in FIXTURE["pairs"]]
LAYOUTS = {"packed": pack_pairs, "two rows": concatenated_pairs}
RTOL = 1e-5


def with_lora(model):
    """peft's LoRA injected in place, as the project's adapter does, the base frozen; the
    adapter's weights are the fixture's."""
    from peft import LoraConfig, inject_adapter_in_model

    inject_adapter_in_model(LoraConfig(**FIXTURE["lora"], fan_in_fan_out=True), model)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(".lora_" in name)
    set_lora_weights(model)
    return model


def ours(case: dict, layout: str) -> tuple[float, dict, dict, dict]:
    """Our loss, metrics' means and per-pair values, and gradient digests for one case."""
    policy = build_model(FIXTURE["seed"])
    batch = LAYOUTS[layout](PAIRS, 0)
    if case["lora"]:
        policy, reference = with_lora(policy), policy
        off = adapter_type("lora").switched_off(policy)
    else:
        reference, off = build_model(FIXTURE["seed"] + 1), contextlib.nullcontext()
    policy.train()
    with torch.no_grad(), off:
        ref_chosen, ref_rejected, _, _ = answer_logps(reference, batch)
    chosen, rejected, chosen_tokens, rejected_tokens = answer_logps(policy, batch)
    counts = {"chosen_tokens": chosen_tokens, "rejected_tokens": rejected_tokens}
    losses, metrics = preference_loss(
        chosen, rejected, ref_chosen, ref_rejected, FIXTURE["beta"], **counts, **case["settings"]
    )
    loss = losses.mean()
    loss.backward()
    grads = {
        key_of(name): digest(key_of(name), parameter.grad)
        for name, parameter in policy.named_parameters()
        if parameter.requires_grad
    }
    means = {name: float(metrics[name].mean()) for name in GATHERED}
    return float(loss.detach()), means, {k: metrics[k].tolist() for k in GATHERED}, grads


def close(got: float, want: float, scale: float = 0.0) -> bool:
    """Equal to `RTOL` relative to the value, or to `scale` (the size of the terms whose
    difference it is) where they cancel."""
    return abs(got - want) <= RTOL * max(abs(want), scale)


def test_the_model_is_built_as_the_fixture_built_it():
    for name, seed in (("policy", FIXTURE["seed"]), ("reference", FIXTURE["seed"] + 1)):
        built = {key_of(n): float(p.detach().double().norm())
                 for n, p in build_model(seed).named_parameters()}  # fmt: skip
        assert built == pytest.approx(FIXTURE["weights"][name], rel=1e-12)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(FIXTURE["cases"]))
def test_loss_metrics_and_gradients_equal_trls(name, layout):
    trl = FIXTURE["cases"][name]
    loss, means, per_pair, grads = ours(trl, layout)
    assert close(loss, trl["loss"]), (loss, trl["loss"])
    # Rewards and margins are differences of log-probabilities of about this size.
    scale = FIXTURE["beta"] * max(
        abs(v) for v in per_pair["logps/chosen"] + per_pair["logps/rejected"]
    )
    for metric in GATHERED:
        assert close(means[metric], trl["metrics"][metric], scale), metric
        for got, want in zip(per_pair[metric], trl["per_pair"][metric], strict=True):
            assert close(got, want, scale), (metric, got, want)
    assert grads.keys() == trl["gradients"].keys()
    for key, want in trl["gradients"].items():
        got, norm = grads[key], want["norm"]
        assert norm > 0, key
        assert close(got["norm"], norm), key
        for value in ("sum", "probe"):
            assert close(got[value], want[value], norm), (key, value)
        for a, b in zip(got["head"], want["head"], strict=True):
            assert close(a, b, norm), key
