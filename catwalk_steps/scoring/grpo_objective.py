"""GRPO's forward (`objective: 'grpo'`, issue 59): sampled completions with their advantages as
one batch of the model (:func:`grpo_batch`, CPU tensors), and the loss and TRL's metrics of it
(:func:`grpo_outputs`, in the rank classifier's forward, through the engine's root wrapper).

A prompt and its G completions are one packed row (the prompt once, each completion after it,
attending to the prompt and to itself: :mod:`.packing`), scored with the logits divided by the
sampling temperature, as TRL scores them; the per-token log-probabilities are laid out
[completions, tokens] (right-padded) for :func:`~catwalk_steps.objectives.grpo_loss.grpo_loss`.
With μ = 1 the old log-probabilities are the current ones detached (the ratio is 1, only its
gradient counts); with μ > 1 the batch holds the sampling policy's (`old_logps`, computed by
this same forward before the first update: its `grpo_logps`). With beta > 0 the reference's
are a frozen model's, carried by the batch (`ref_logps`), else the base's with the adapter off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..adapters.registry import type_of
from ..objectives.grpo import GrpoSettings
from ..objectives.grpo_loss import grpo_loss
from .packing import PackedRow, pack_rows
from .shared_context import packed_log_probs, packed_log_probs_and_entropies

if TYPE_CHECKING:
    from transformers import PreTrainedModel

PACKED = "packed_"  # the packed rows' keys (:func:`~.packing.pack_rows`)


def grpo_batch(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    in_loss: Sequence[bool],
    advantages: torch.Tensor,
    dapo_tokens: float,
    pad_id: int,
) -> dict[str, torch.Tensor]:
    """The model's `grpo` batch: `completions` (G per prompt, prompt by prompt, each at least one
    token), which of them count in the loss (`mask_truncated_completions` leaves the truncated
    ones out), their advantages, and the number "dapo" divides by. No prompt (a rank whose
    share is padding): a stand-in row that weighs nothing, so that every rank runs the forward."""
    if not prompts:
        prompts, completions, in_loss = [[pad_id]], [[pad_id]], [False]
        advantages = torch.zeros(1)
    group = len(completions) // len(prompts)
    rows = [
        PackedRow(
            tuple(prompt),
            tuple(tuple(c) for c in completions[i * group : (i + 1) * group]),
            tuple(range(i * group, (i + 1) * group)),
        )
        for i, prompt in enumerate(prompts)
    ]
    lengths = torch.tensor([len(c) for c in completions])
    tokens = torch.arange(int(lengths.max()))[None] < lengths[:, None]
    return {
        **pack_rows(rows, pad_id),
        "token_mask": tokens,
        "completion_mask": tokens & torch.tensor(list(in_loss))[:, None],
        "advantages": advantages.float(),
        "dapo_tokens": torch.tensor(float(dapo_tokens)),
    }


def per_completion(values: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """[completions, tokens]: a packed forward's values of the completion tokens (in target
    order) laid out by completion, right-padded with 0 where `tokens` is False."""
    return values.new_zeros(tokens.shape).masked_scatter(tokens, values)


def completion_logps(
    lm: PreTrainedModel, batch: Mapping[str, Any], temperature: float
) -> dict[str, torch.Tensor]:
    """A frozen reference's forward of a `grpo` batch (no gradients, no loss): its
    log-probabilities of the completion tokens, [completions, tokens], as `grpo_logps`."""
    packed = {key: value for key, value in batch.items() if key.startswith(PACKED)}
    logps = packed_log_probs(lm, packed, temperature).float()
    return {"grpo_logps": per_completion(logps, batch["token_mask"])}


def reference_logps(
    lm: PreTrainedModel,
    batch: Mapping[str, Any],
    packed: Mapping[str, torch.Tensor],
    adapter: Any,
    temperature: float,
) -> torch.Tensor:
    """[completions, tokens]: the reference's log-probabilities of the completion tokens: a
    frozen model's, carried by the batch (`ref_logps`, rows: computed once per generation batch
    by :mod:`catwalk_steps.training.reference`), else the base with the adapter off (by the one
    rule, as DPO's), no gradients."""
    tokens = batch["token_mask"]
    given = batch.get("ref_logps")
    if given is not None:
        return torch.tensor(given, dtype=torch.float32, device=tokens.device)
    if adapter is None:
        raise ValueError(
            "grpo: beta is not 0, and the batch has no ref_logps nor the model an adapter"
        )
    with torch.no_grad(), type_of(adapter).switched_off(lm):
        logps = packed_log_probs(lm, packed, temperature).float()
    return per_completion(logps, tokens)


def grpo_outputs(
    lm: PreTrainedModel, batch: Mapping[str, Any], settings: GrpoSettings, adapter: Any = None
) -> dict[str, Any]:
    """The loss of a `grpo` batch (:func:`grpo_batch`) and TRL's metrics of it (`grpo_metrics`:
    means over its completion tokens in the loss, of which there are `grpo_tokens`); with
    beta > 0, the KL term to the reference (:func:`reference_logps`: the batch's `ref_logps`,
    else the base with `adapter`, the model's spec, off)."""
    packed = {key: value for key, value in batch.items() if key.startswith(PACKED)}
    logps, entropies = packed_log_probs_and_entropies(lm, packed, settings.temperature)
    tokens, mask = batch["token_mask"], batch["completion_mask"]
    per_token = per_completion(logps, tokens)
    spread = per_completion(entropies.detach(), tokens)
    ref = None
    if settings.beta != 0:  # after the policy's forward, as DPO's reference
        ref = reference_logps(lm, batch, packed, adapter, settings.temperature)
    old = batch.get("old_logps")  # μ > 1 (rows of numbers); μ = 1: this policy sampled them
    loss, metrics = grpo_loss(
        per_token,
        None if old is None else torch.tensor(old, dtype=torch.float32, device=tokens.device),
        ref,  # beta 0: none
        batch["advantages"],
        mask,
        beta=settings.beta,
        epsilon_low=settings.epsilon,
        epsilon_high=settings.clip_high,
        loss_type=settings.loss_type,
        max_completion_length=settings.max_completion_length,
        dapo_tokens=batch["dapo_tokens"],
        entropies=spread,
    )
    return {
        "loss": loss,
        "grpo_metrics": metrics,
        "grpo_tokens": mask.sum(),
        "grpo_logps": per_token.detach(),
    }
