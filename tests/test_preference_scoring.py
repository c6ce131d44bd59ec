"""Preference pairs scored with the prompt once (packed rows) equal TRL's two rows and each
(prompt, answer) alone, gradients included, on tiny GPT-2 and Llama; a model that cannot take
packed rows falls back to two rows with one log line; the losses' arithmetic."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from catwalk_steps.objectives.dpo_loss import METRICS, preference_loss
from catwalk_steps.scoring.packing import packed_attention
from catwalk_steps.scoring.preference import (
    PreferencePair,
    answer_logps,
    concatenated_pairs,
    pack_pairs,
)

from .conftest import TINY_GPT2
from .test_shared_context import TINY_BLOOM, TINY_LLAMA

VOCAB = 61
MODELS = {
    "gpt2": TINY_GPT2,
    "gpt2 eager": {**TINY_GPT2, "attn_implementation": "eager"},
    "llama": TINY_LLAMA,
}
PAIRS = [  # uneven prompts; one-token answers (nothing fed); chosen longer, then shorter
    PreferencePair([5, 6, 7, 8, 9], [10, 11, 12], [13]),
    PreferencePair([1], [2], [3, 4, 5, 6, 7, 8]),
    PreferencePair([9, 8, 7, 6, 5, 4, 3, 2, 1, 2, 3], [4, 4, 4, 4], [4, 4, 5]),
    PreferencePair([7, 7], [1], [2]),
]


def tiny_lm(config: dict) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = {key: value for key, value in config.items() if key != "model_type"}
    torch.manual_seed(0)
    hf_config = AutoConfig.for_model(config["model_type"], vocab_size=VOCAB, **settings)
    return AutoModelForCausalLM.from_config(hf_config).eval()


def alone(lm, prompt, answer) -> torch.Tensor:
    """log p(answer | prompt) from the one unpadded sequence, without the scoring code."""
    ids = torch.tensor([[*prompt, *answer]])
    log_probs = lm(ids[:, :-1]).logits[0].float().log_softmax(-1)
    start = len(prompt)
    return sum(log_probs[p - 1, ids[0, p]] for p in range(start, ids.size(1)))


def per_pair(lm, pairs):
    chosen = torch.stack([alone(lm, p.prompt, p.chosen) for p in pairs])
    rejected = torch.stack([alone(lm, p.prompt, p.rejected) for p in pairs])
    return chosen, rejected


def gradients(lm, compute) -> torch.Tensor:
    """The gradient of a fixed mix of every answer's log-probability."""
    lm.zero_grad()
    chosen, rejected = compute()
    weights = torch.linspace(0.5, 1.5, 2 * len(chosen))
    (torch.cat([chosen, rejected]) * weights).sum().backward()
    return torch.cat([p.grad.flatten() for p in lm.parameters() if p.grad is not None])


@pytest.fixture(scope="module", params=list(MODELS))
def lm(request):
    return tiny_lm(MODELS[request.param])


def test_packed_pairs_equal_two_rows_and_each_answer_alone(lm):
    packed = pack_pairs(PAIRS, pad_id=0)
    rows = concatenated_pairs(PAIRS, pad_id=0)
    chosen, rejected, chosen_tokens, rejected_tokens = answer_logps(lm, packed)
    assert chosen_tokens.tolist() == [3, 1, 4, 1] and rejected_tokens.tolist() == [1, 6, 3, 1]
    two_rows = answer_logps(lm, rows)
    want_chosen, want_rejected = per_pair(lm, PAIRS)
    for got, want in [(chosen, two_rows[0]), (rejected, two_rows[1]),
                      (chosen, want_chosen), (rejected, want_rejected)]:  # fmt: skip
        assert got.dtype == torch.float32
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got, want)
    # Packed is what runs when the batch holds both layouts.
    both = answer_logps(lm, {**rows, **packed})
    assert torch.equal(both[0], chosen) and torch.equal(both[1], rejected)


def test_packed_pairs_gradients_equal_two_rows_and_each_answer_alone(lm):
    packed_grads = gradients(lm, lambda: answer_logps(lm, pack_pairs(PAIRS, 0))[:2])
    row_grads = gradients(lm, lambda: answer_logps(lm, concatenated_pairs(PAIRS, 0))[:2])
    alone_grads = gradients(lm, lambda: per_pair(lm, PAIRS))
    scale = alone_grads.abs().max()
    assert scale > 0
    for grads in (packed_grads, row_grads):
        assert torch.allclose(grads, alone_grads, rtol=1e-5, atol=1e-5 * scale)


def test_a_pair_is_one_row_holding_the_prompt_once():
    pairs = [PreferencePair([1, 2, 3], [4, 5], [6, 7, 8]), PreferencePair([9], [4], [5, 6])]
    packed = pack_pairs(pairs, pad_id=0)
    # Prompt, chosen but its last token, rejected but its last token.
    assert packed["packed_input_ids"].tolist() == [[1, 2, 3, 4, 6, 7], [9, 5, 0, 0, 0, 0]]
    assert packed["packed_position_ids"].tolist() == [[0, 1, 2, 3, 3, 4], [0, 1, 0, 0, 0, 0]]
    assert packed["packed_segments"].tolist() == [[0, 0, 0, 1, 2, 2], [0, 2, -1, -1, -1, -1]]
    assert packed["packed_target_ids"].tolist() == [4, 5, 6, 7, 8, 4, 5, 6]
    assert packed["packed_target_sequence"].tolist() == [0, 0, 1, 1, 1, 2, 3, 3]
    assert packed["answer_tokens"].tolist() == [[2, 3], [1, 2]]
    mask = packed_attention(packed["packed_segments"])[0, 0]
    assert mask[4].tolist() == [True, True, True, False, True, False]  # rejected: not chosen's
    rows = concatenated_pairs(pairs, pad_id=0)
    assert rows["pair_input_ids"].tolist() == [
        [1, 2, 3, 4, 5, 0], [9, 4, 0, 0, 0, 0], [1, 2, 3, 6, 7, 8], [9, 5, 6, 0, 0, 0]
    ]  # fmt: skip
    assert rows["pair_answer_mask"].sum(1).tolist() == [2, 1, 3, 2]
    assert rows["pair_attention_mask"].sum(1).tolist() == [5, 2, 6, 3]
    assert rows["pair_logits_from"].tolist() == [1]  # the shortest prompt's length


def test_an_empty_prompt_or_answer_is_refused():
    with pytest.raises(ValueError, match="empty prompt"):
        PreferencePair([], [1], [2])
    with pytest.raises(ValueError, match="empty rejected"):
        PreferencePair([1], [2], [])


def test_a_model_without_packed_rows_falls_back_to_two_rows_with_one_log_line(caplog):
    lm = tiny_lm(TINY_BLOOM)
    packed, rows = pack_pairs(PAIRS, 0), concatenated_pairs(PAIRS, 0)
    with caplog.at_level(logging.INFO, logger="catwalk_steps.scoring.preference"):
        first = answer_logps(lm, {**packed, **rows})
        answer_logps(lm, {**packed, **rows})
    lines = [r.getMessage() for r in caplog.records if "preference pairs" in r.getMessage()]
    assert lines == [
        "preference pairs: BloomForCausalLM cannot take packed rows (its forward takes no "
        "position_ids); scoring each pair as two rows"
    ]
    with torch.no_grad():
        want_chosen, want_rejected = per_pair(lm, PAIRS)
    assert torch.allclose(first[0], want_chosen, rtol=1e-5, atol=1e-5)
    assert torch.allclose(first[1], want_rejected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="no two-row layout"):
        answer_logps(lm, packed)


def logsigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x))


# Policy log-ratio -1.0 - (-4.5) = 3.5, the reference's -1.0 - (-0.5) = -0.5: h = 4; beta = 0.25.
SUMS = [torch.tensor([v]) for v in (-1.0, -4.5, -1.0, -0.5)]  # chosen, rejected, refs
TOKENS = {"chosen_tokens": torch.tensor([2]), "rejected_tokens": torch.tensor([4])}


@pytest.mark.parametrize(
    "loss_type, smoothing, want",
    [
        ("sigmoid", 0.0, -logsigmoid(1.0)),
        ("sigmoid", 0.1, -0.9 * logsigmoid(1.0) - 0.1 * logsigmoid(-1.0)),
        ("robust", 0.1, (-0.9 * logsigmoid(1.0) + 0.1 * logsigmoid(-1.0)) / 0.8),
        ("hinge", 0.0, 0.0),
        # per token: (0 / 2) - (-4 / 4) = 1.0; 1 / (2 beta) = 2
        ("ipo", 0.0, 1.0),
    ],
)
def test_preference_losses_and_metrics(loss_type, smoothing, want):
    losses, metrics = preference_loss(*SUMS, beta=0.25, loss_type=loss_type,
                                      label_smoothing=smoothing, **TOKENS)  # fmt: skip
    assert losses.tolist() == pytest.approx([want], rel=1e-6)
    assert list(metrics) == list(METRICS)
    # Rewards and logps from the sums, IPO's too (it divides by token counts in its loss only).
    assert metrics["rewards/chosen"].tolist() == pytest.approx([0.0])
    assert metrics["rewards/rejected"].tolist() == pytest.approx([-1.0])
    assert metrics["rewards/margins"].tolist() == pytest.approx([1.0])
    assert metrics["logps/chosen"].tolist() == [-1.0]
    assert metrics["logps/rejected"].tolist() == [-4.5]
    assert metrics["rewards/accuracies"].tolist() == [1.0]


def test_rpo_adds_the_chosen_answers_mean_token_nll_to_every_pair():
    chosen = torch.tensor([-2.0, -4.0], requires_grad=True)
    rejected, ref_chosen, ref_rejected = torch.tensor([-3.0, -3.0]), torch.zeros(2), torch.zeros(2)
    plain, _ = preference_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1)
    tokens = {"chosen_tokens": torch.tensor([1, 2]), "rejected_tokens": torch.tensor([3, 3])}
    losses, metrics = preference_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1,
                                      rpo_alpha=0.5, **tokens)  # fmt: skip
    assert metrics["nll_loss"].tolist() == pytest.approx([2.0, 2.0])  # 6 nats over 3 tokens
    assert (losses - plain).tolist() == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="token counts"):
        preference_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1, rpo_alpha=0.5)
    with pytest.raises(ValueError, match="loss_type"):
        preference_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1, loss_type="kto")
