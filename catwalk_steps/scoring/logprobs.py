"""The arithmetic of rank classification: continuation log-probabilities, choice metrics (the
losses are the objectives': :mod:`catwalk_steps.objectives`).

Everything here is in float32 whatever the autocast dtype, and knows nothing of devices or
distribution: tensors arrive where they should be.
"""

from __future__ import annotations

import torch

LOG_2_OF_E = 1.44269504089  # bits per nat: a loss per byte in bits (bits per byte)


def continuation_log_probs(
    lm: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    continuation_mask: torch.Tensor,
    logits_from: int = 1,
    supports_logits_to_keep: bool = False,
) -> torch.Tensor:
    """Sum of log p(token | prefix) over each sequence's continuation tokens, in float32.

    The last position is only ever a target: it is left out of the model's input (as
    lm-evaluation-harness does), so a sequence of `max_length + 1` tokens fits a model of
    `max_length` positions. Sequences are right-padded, so padding never changes the scores of
    real tokens. No continuation token sits before position `logits_from`, so logits are only
    computed from position `logits_from - 1` on when the model supports it, and the
    vocabulary-sized log-softmax only runs over continuation positions.
    """
    length = input_ids.size(1)
    keep = length - logits_from  # positions logits_from-1 .. length-2 predict the targets
    kwargs = {"logits_to_keep": keep} if supports_logits_to_keep else {}
    logits = lm(
        input_ids=input_ids[:, :-1],
        attention_mask=attention_mask[:, :-1],
        use_cache=False,
        **kwargs,
    ).logits
    predicting = logits[:, -keep:]
    targets = input_ids[:, logits_from:]
    mask = continuation_mask[:, logits_from:]
    rows = torch.arange(input_ids.size(0), device=input_ids.device)[:, None].expand_as(mask)[mask]
    token_logits = predicting[mask].float()
    token_log_probs = token_logits.log_softmax(dim=-1).gather(-1, targets[mask][:, None])[:, 0]
    scores = torch.zeros(input_ids.size(0), dtype=torch.float32, device=input_ids.device)
    return scores.index_add(0, rows, token_log_probs)


def choice_metrics(
    scores: torch.Tensor,
    labels: torch.Tensor,
    choice_chars: torch.Tensor,
    weights: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Weighted counts of right answers by raw score and by score per character, and whether
    each instance's pick is right (`right`, `right_norm`: 1.0 or 0.0, unweighted: what the
    kinds sum per part of a grouped task).

    `scores` and `choice_chars` are [instances, choices]; absent choices score -inf.
    """
    right = (scores.argmax(dim=1) == labels).float()
    right_norm = ((scores / choice_chars.clamp(min=1)).argmax(dim=1) == labels).float()
    return {
        "correct": (right * weights).sum(),
        "correct_norm": (right_norm * weights).sum(),
        "count": weights.sum(),
        "right": right,
        "right_norm": right_norm,
    }
