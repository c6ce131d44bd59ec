"""Preference pairs, the scoring half: each answer's summed token log-probability, with gradients.

A pair's chosen and rejected answers share their prompt, so a row holds the prompt once, then
the chosen answer, then the rejected one (:func:`pack_pairs`): shared-context scoring's packed
row (:mod:`.packing`) with two continuations. The attention mask lets the rejected answer see
the prompt and itself only, and its position ids restart after the prompt, so every token sits
where it would in (prompt, answer) alone; the last token of an answer is only a target and is
not fed. The prompt's activations are computed, and its gradients flow back, once for both
answers instead of twice as in TRL's two concatenated rows (:func:`concatenated_pairs`), which
stay for models that cannot take packed rows (:func:`.shared_context.packing_support` says
which) and for the benchmark (`bench/preference.py`).

An answer's log-probability is the sum over its tokens, as TRL's DPOTrainer sums them; the token
counts come with it (IPO averages). The losses: :mod:`.preference_loss`.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .logprobs import continuation_log_probs
from .packing import PackedRow, pack_rows
from .shared_context import packed_log_probs, packing_support

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

ANSWER_TOKENS = "answer_tokens"  # [pairs, 2]: the chosen and rejected answers' token counts
ROW_KEYS = ("pair_input_ids", "pair_attention_mask", "pair_answer_mask", "pair_logits_from")


@dataclass(frozen=True)
class PreferencePair:
    """Token ids of a prompt and its two answers, already tokenized and cut (the kind does
    that). The prompt is not empty (its last token predicts each answer's first), nor is an
    answer."""

    prompt: Sequence[int]
    chosen: Sequence[int]
    rejected: Sequence[int]

    def __post_init__(self) -> None:
        for name in ("prompt", "chosen", "rejected"):
            if len(getattr(self, name)) == 0:
                raise ValueError(f"preference pair: empty {name} (no token to score from)")


def answer_tokens(pairs: Sequence[PreferencePair]) -> torch.Tensor:
    return torch.tensor([[len(p.chosen), len(p.rejected)] for p in pairs])


def pack_pairs(pairs: Sequence[PreferencePair], pad_id: int) -> dict[str, torch.Tensor]:
    """One packed row per pair (prompt, chosen, rejected), as CPU tensors: the `packed_*` keys
    of :func:`.packing.pack_rows` (pair `i`'s chosen answer is sequence `2i`, its rejected one
    `2i + 1`) and `answer_tokens`. :func:`answer_logps` runs them."""
    rows = [
        PackedRow(tuple(p.prompt), (tuple(p.chosen), tuple(p.rejected)), (2 * i, 2 * i + 1))
        for i, p in enumerate(pairs)
    ]
    return {**pack_rows(rows, pad_id), ANSWER_TOKENS: answer_tokens(pairs)}


def concatenated_pairs(pairs: Sequence[PreferencePair], pad_id: int) -> dict[str, torch.Tensor]:
    """TRL's layout: two right-padded rows per pair, (prompt, chosen) and (prompt, rejected),
    the chosen rows first (`pair_input_ids`, `pair_attention_mask`, `pair_answer_mask`:
    [2 * pairs, length]), `pair_logits_from` (the shortest prompt: no answer token comes
    earlier, so no logits are needed before it) and `answer_tokens`. For models that cannot
    take packed rows."""
    sequences = [(p.prompt, p.chosen) for p in pairs] + [(p.prompt, p.rejected) for p in pairs]
    length = max(len(prompt) + len(answer) for prompt, answer in sequences)
    ids = torch.full((len(sequences), length), pad_id)
    attention = torch.zeros((len(sequences), length), dtype=torch.long)
    answer_mask = torch.zeros((len(sequences), length), dtype=torch.bool)
    for row, (prompt, answer) in enumerate(sequences):
        end = len(prompt) + len(answer)
        ids[row, :end] = torch.tensor([*prompt, *answer])
        attention[row, :end] = 1
        answer_mask[row, len(prompt) : end] = True
    return {
        "pair_input_ids": ids,
        "pair_attention_mask": attention,
        "pair_answer_mask": answer_mask,
        "pair_logits_from": torch.tensor([min(len(p.prompt) for p in pairs)]),
        ANSWER_TOKENS: answer_tokens(pairs),
    }


_SUPPORT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # lm -> (why not, keeps)


def model_support(lm: PreTrainedModel) -> tuple[str | None, bool]:
    """(why `lm` cannot take packed pairs, or None; whether its forward takes
    `logits_to_keep`), asked once per model: the first is said once in the log."""
    if lm not in _SUPPORT:
        reason = packing_support(lm)
        keeps = "logits_to_keep" in inspect.signature(lm.forward).parameters
        _SUPPORT[lm] = (reason, keeps)
        if reason is not None:
            logger.info(
                "preference pairs: %s cannot take packed rows (%s); scoring each pair as two rows",
                type(lm).__name__,
                reason,
            )
    return _SUPPORT[lm]


def answer_logps(
    lm: PreTrainedModel, batch: Mapping[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(chosen_logps, rejected_logps, chosen_tokens, rejected_tokens), each [pairs]: the sums of
    the answers' token log-probabilities (float32, with gradients) and their token counts.

    From the packed rows of :func:`pack_pairs` when the batch has them and the model takes
    them, else from :func:`concatenated_pairs`' two rows (a batch may hold both layouts: a
    collator that does not know the model builds both)."""
    tokens = batch[ANSWER_TOKENS]
    pairs = tokens.size(0)
    unsupported, keeps_logits = model_support(lm)
    if "packed_input_ids" in batch and unsupported is None:
        token_log_probs = packed_log_probs(lm, batch)
        sums = torch.zeros(2 * pairs, dtype=torch.float32, device=token_log_probs.device)
        sums = sums.index_add(0, batch["packed_target_sequence"], token_log_probs)
        chosen, rejected = sums[0::2], sums[1::2]
    elif all(key in batch for key in ROW_KEYS):
        ids, attention, answers = (batch[key] for key in ROW_KEYS[:3])
        logits_from = int(batch["pair_logits_from"][0])
        sums = continuation_log_probs(lm, ids, attention, answers, logits_from, keeps_logits)
        chosen, rejected = sums[:pairs], sums[pairs:]
    else:
        raise ValueError(
            f"preference batch: {type(lm).__name__} cannot take packed rows ({unsupported}) "
            "and the batch has no two-row layout (concatenated_pairs)"
        )
    return chosen, rejected, tokens[:, 0], tokens[:, 1]
