"""Shared-context scoring, the model half: one forward over packed rows
(:mod:`~catwalk_steps.scoring.packing`), with the LM head and the float32 log-softmax run only
where a continuation token is predicted.

Why packed rows and not the model's key/value cache of the context expanded over the choices:
the cache needs two forwards per batch (context, then continuations), pads every continuation
of a batch to the longest, and grows by concatenation in every layer; a packed row holds a
question's continuations back to back, so its padding is only between rows of similar length.
Measured on 2 CPU cores (`bench/shared_context_designs.py`, GPT-2-small shape, float32, batch
32; `bench/results/shared_context_designs.md`): packed rows 1.76x the cache's requests/s on
HellaSwag, 1.68x on PIQA, 1.37x on MMLU, with the same scores.
Under FSDP one forward also means one all-gather per unit, and a number of forwards that never
depends on a rank's data.

A model takes packed rows when its forward accepts `position_ids` and a 4D attention mask
(attention implementations "sdpa" and "eager"), it has an LM head module, its positions do not
come from the 2D mask (ALiBi models) and all its layers attend alike (a sliding window, as
Mistral's, is written into the mask; layers mixing window and full attention are not); any other
model is scored one sequence per choice, as before, with one log line.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from .packing import packed_attention

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

MASKED_ATTENTION = ("sdpa", "eager")
ALIBI_MODEL_TYPES = ("bloom", "mpt")


def packing_support(lm: PreTrainedModel) -> str | None:
    """Why `lm` cannot score packed rows, or None when it can."""
    config = getattr(lm, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return "it is not a Hugging Face decoder-only model"
    if "position_ids" not in inspect.signature(lm.forward).parameters:
        return "its forward takes no position_ids"
    if lm.get_output_embeddings() is None:
        return "it has no LM head module"
    layer_types = set(getattr(config, "layer_types", None) or ())
    if len(layer_types) > 1:
        return f"its layers mix attention kinds ({', '.join(sorted(layer_types))})"
    attention = getattr(config, "_attn_implementation", None)
    if attention not in MASKED_ATTENTION:
        return f"its attention implementation {attention!r} takes no 4D attention mask"
    if getattr(config, "alibi", False) or config.model_type in ALIBI_MODEL_TYPES:
        return "its ALiBi positions come from the 2D attention mask"
    return None


def log_fallback(lm: PreTrainedModel, reason: str) -> None:
    logger.info(
        "shared-context scoring: %s cannot take packed rows (%s); scoring one sequence per choice",
        type(lm).__name__,
        reason,
    )


@contextlib.contextmanager
def head_inputs_at(head: torch.nn.Module, rows: torch.Tensor, cols: torch.Tensor) -> Iterator:
    """While active, the LM head sees only the hidden states at (`rows`, `cols`), as one
    sequence [1, positions, width]: the model's own head (and whatever follows it: logit
    soft-capping, scaling) runs on those positions only. A forward pre-hook on the head module,
    removed on exit: it works whichever submodule the causal LM calls for its hidden states
    (OPT calls its decoder directly), and wrappers around the root are untouched."""

    def keep_positions(module, args):
        return (args[0][rows, cols][None], *args[1:])

    handle = head.register_forward_pre_hook(keep_positions)
    try:
        yield
    finally:
        handle.remove()


def sliding_window(config: Any) -> int | None:
    """The attention window of every layer (Mistral's), or None for full attention."""
    window = getattr(config, "sliding_window", None)
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


def attention_mask_for(
    lm: PreTrainedModel, segments: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """The packed rows' 4D mask in the form the model's attention takes: boolean for SDPA,
    additive (0 or the float32 minimum) for eager attention; a sliding window (Mistral's) is
    applied to the tokens' positions, as the model's own mask would."""
    visible = packed_attention(segments, positions, sliding_window(lm.config))
    if lm.config._attn_implementation == "sdpa":
        return visible
    blocked = torch.finfo(torch.float32).min
    return torch.zeros(visible.shape, device=visible.device).masked_fill(~visible, blocked)


def predicted_log_probs(
    lm: PreTrainedModel, packed: Mapping[str, torch.Tensor], temperature: float = 1.0
) -> torch.Tensor:
    """[predicting positions, vocabulary]: the log-softmax of the logits divided by
    `temperature`, in float32, at the packed rows' predicting positions only (the head's logits
    exist only there: one per fed continuation token, one per row for the context's last
    token)."""
    rows, cols = packed["packed_predict_rows"], packed["packed_predict_cols"]
    positions = packed["packed_position_ids"]
    with head_inputs_at(lm.get_output_embeddings(), rows, cols):
        logits = lm(
            input_ids=packed["packed_input_ids"],
            attention_mask=attention_mask_for(lm, packed["packed_segments"], positions),
            position_ids=positions,
            use_cache=False,
        ).logits[0]
    logits = logits.float()
    if temperature != 1.0:  # 1: exactly the untempered log-softmax, not a division by 1.0
        logits = logits / temperature
    return logits.log_softmax(dim=-1)


def packed_log_probs(
    lm: PreTrainedModel, packed: Mapping[str, torch.Tensor], temperature: float = 1.0
) -> torch.Tensor:
    """log p(target | its prefix) for every continuation token of the packed rows, float32.

    The log-softmax runs once per predicting position, and the targets predicted at a position
    share it. `temperature`: of the distribution the tokens were sampled from (GRPO scores a
    completion under the logits divided by its sampling temperature, as TRL does); 1 for
    scoring and DPO.
    """
    log_probs = predicted_log_probs(lm, packed, temperature)
    return log_probs[packed["packed_target_predictor"], packed["packed_target_ids"]]


def packed_log_probs_and_entropies(
    lm: PreTrainedModel, packed: Mapping[str, torch.Tensor], temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`packed_log_probs` and, for every continuation token, the entropy of the
    (tempered) distribution it was drawn from: what TRL reports as GRPO's `entropy`. From the
    same forward; the entropy costs one more pass over the vocabulary, so only callers that
    report it pay for it."""
    log_probs = predicted_log_probs(lm, packed, temperature)
    entropies = -(log_probs.exp() * log_probs).sum(dim=-1)
    predictor = packed["packed_target_predictor"]
    return log_probs[predictor, packed["packed_target_ids"]], entropies[predictor]


def packed_scores(
    lm: PreTrainedModel, packed: Mapping[str, torch.Tensor], num_sequences: int
) -> torch.Tensor:
    """Each sequence's summed continuation log-probability (float32), [num_sequences]."""
    token_log_probs = packed_log_probs(lm, packed)
    scores = torch.zeros(num_sequences, dtype=torch.float32, device=token_log_probs.device)
    return scores.index_add(0, packed["packed_target_sequence"], token_log_probs)
