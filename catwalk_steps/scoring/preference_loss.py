"""Preference losses (DPO and its variants) and their metrics, as TRL's DPOTrainer computes them.

From the policy's and the reference's summed answer log-probabilities
(:func:`.preference.answer_logps`, the reference's usually precomputed), per pair:

- `sigmoid` (DPO): -log sigmoid(beta * h) with h = (chosen - rejected) - (ref_chosen -
  ref_rejected); with `label_smoothing` e it is conservative DPO, (1 - e) * that - e * log
  sigmoid(-beta * h), as TRL before 1.0 computed it (TRL 1.16 smooths `robust` only and
  ignores `label_smoothing` here);
- `robust` (robust DPO): ((1 - e) * -log sigmoid(beta * h) + e * log sigmoid(-beta * h)) /
  (1 - 2e);
- `hinge` (SLiC): relu(1 - beta * h);
- `ipo`: (h - 1 / (2 * beta))^2, with each answer's log-ratio divided by its token count (in the
  loss only: rewards and logps stay sums, as in TRL 1.16);
- `rpo_alpha`: plus alpha times the chosen answers' mean token NLL over the batch (RPO; TRL 1.16
  writes it `loss_type=["sigmoid", "sft"]`, `loss_weights=[1, alpha]`), the same number added
  to every pair.

Rewards are beta * (policy - reference) per answer, without gradients. The metrics keep TRL's
names and are per pair, so a caller can weight, reduce across ranks and take standard errors;
TRL logs their means. Pure float32 arithmetic: no model, no device choices.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..settings.preference import LOSS_TYPES

METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)


def pair_losses(
    logits: torch.Tensor, beta: float, loss_type: str, label_smoothing: float
) -> torch.Tensor:
    """Each pair's loss from h = policy log-ratio - reference log-ratio (TRL's `logits`)."""
    if loss_type == "sigmoid":
        return (
            -F.logsigmoid(beta * logits) * (1 - label_smoothing)
            - F.logsigmoid(-beta * logits) * label_smoothing
        )
    if loss_type == "robust":
        return (
            -F.logsigmoid(beta * logits) * (1 - label_smoothing)
            + F.logsigmoid(-beta * logits) * label_smoothing
        ) / (1 - 2 * label_smoothing)
    if loss_type == "hinge":
        return torch.relu(1 - beta * logits)
    if loss_type == "ipo":
        return (logits - 1 / (2 * beta)) ** 2
    raise ValueError(f"loss_type: expected one of {LOSS_TYPES}, got {loss_type!r}")


def preference_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    rpo_alpha: float | None = None,
    chosen_tokens: torch.Tensor | None = None,
    rejected_tokens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss per pair [pairs], metrics per pair under TRL's names, plus `nll_loss` with
    `rpo_alpha`). Log-probabilities are answer sums ([pairs]); `chosen_tokens` and
    `rejected_tokens` (their token counts) are needed by `ipo` and `rpo_alpha`. The caller
    averages the losses over pairs, as TRL does (padding pairs weighted 0)."""
    policy_chosen, policy_rejected = policy_chosen.float(), policy_rejected.float()
    ref_chosen, ref_rejected = ref_chosen.float(), ref_rejected.float()
    chosen_ratio, rejected_ratio = policy_chosen - ref_chosen, policy_rejected - ref_rejected
    nll = None
    if loss_type == "ipo" or rpo_alpha is not None:
        if chosen_tokens is None or rejected_tokens is None:
            raise ValueError(f"{loss_type}, rpo_alpha: the answers' token counts are needed")
        chosen_count = chosen_tokens.float().clamp(min=1)
        if rpo_alpha is not None:  # TRL's "sft" term: the batch's chosen tokens' mean NLL
            nll = -policy_chosen.sum() / chosen_count.sum()
        if loss_type == "ipo":  # per token, in the loss only (TRL 1.16)
            chosen_ratio = chosen_ratio / chosen_count
            rejected_ratio = rejected_ratio / rejected_tokens.float().clamp(min=1)
    losses = pair_losses(chosen_ratio - rejected_ratio, beta, loss_type, label_smoothing)
    if nll is not None and rpo_alpha is not None:
        losses = losses + rpo_alpha * nll
    chosen_rewards = beta * (policy_chosen - ref_chosen).detach()
    rejected_rewards = beta * (policy_rejected - ref_rejected).detach()
    metrics = {
        "rewards/chosen": chosen_rewards,
        "rewards/rejected": rejected_rewards,
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float(),
        "rewards/margins": chosen_rewards - rejected_rewards,
        "logps/chosen": policy_chosen.detach(),
        "logps/rejected": policy_rejected.detach(),
    }
    if nll is not None:
        metrics["nll_loss"] = nll.detach().expand_as(losses)
    return losses, metrics
