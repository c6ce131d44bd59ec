"""GRPO (RLVR), the arithmetic: rewards into advantages, and the clipped policy-gradient loss with
its KL to a reference, as TRL 1.16's GRPOTrainer computes them; pure float32 tensors in and out
(no model, no state, no device choices). Its settings: :mod:`.grpo`.

From rewards to advantages (over the whole generation batch, gathered across ranks first: a
group's G completions must all be there):

- :func:`weighted_rewards`: each completion's rewards times their weights, summed over the
  rewards that answered it (a reward may answer NaN, "none": left out of the sum, as TRL's
  nansum leaves it); NaN when none answered (unscorable);
- :func:`group_advantages`: reward minus its group's mean (over the scorable ones), divided by
  the group's standard deviation plus 1e-4 (`scale_rewards` "group"), by the whole batch's
  ("batch"), or not divided ("none"); unscorable completions get 0.

The loss (:func:`grpo_loss`), per completion token, with the ratio r = exp(logp - old logp):
-min(r * A, clip(r, 1 - epsilon_low, 1 + epsilon_high) * A), plus beta times the k3 estimate of
KL(policy || reference), exp(ref - logp) - (ref - logp) - 1, multiplied by r (TRL 1.16's
`use_bias_correction_kl`, on by default: it changes the gradient even where r is 1). Every
log-probability is of the logits divided by the sampling temperature, as TRL scores them. The
old log-probabilities are the sampling policy's (`num_iterations` > 1: the batch is trained on
again after the policy moved); with `num_iterations` 1 they are the current ones detached
(None here), so r is 1 and only its gradient counts.

The per-token losses are reduced over the completion tokens by `loss_type`: "grpo" each
completion's mean, then the mean over completions; "bnpo" the mean over the batch's tokens;
"dr_grpo" the sum over (completions x `max_completion_length`); "dapo" (TRL 1.16's default) the
sum over the tokens of the whole optimizer step (`dapo_tokens`). The metrics keep TRL's names.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALE_REWARDS = ("group", "batch", "none")
STD_EPSILON = 1e-4  # added to the standard deviation the advantages are divided by (TRL's)


def nan_std(values: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """The standard deviation (Bessel's correction) of the values that are not NaN, along `dim`
    (None: all); NaN where fewer than two are."""
    if dim is None:
        values, dim = values.flatten(), 0
    present = ~values.isnan()
    count = present.sum(dim=dim, keepdim=True)
    deviation = values - values.nanmean(dim=dim, keepdim=True)
    variance = (deviation**2).nansum(dim=dim, keepdim=True) / (count - 1).clamp(min=1)
    std = variance.sqrt().masked_fill(count < 2, float("nan"))
    return std.squeeze(dim)


def weighted_rewards(
    per_reward: torch.Tensor, weights: Sequence[float] | torch.Tensor
) -> torch.Tensor:
    """[completions]: each completion's rewards ([completions, rewards]) times `weights`, summed
    over those that are not NaN; NaN where all are (unscorable)."""
    per_reward = per_reward.float()
    weights = torch.as_tensor(weights, dtype=torch.float32, device=per_reward.device)
    summed = (per_reward * weights[None]).nansum(dim=1)
    return summed.masked_fill(per_reward.isnan().all(dim=1), float("nan"))


def baseline_and_scale(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each completion's baseline (its group's mean reward) and the standard deviation its
    advantage is divided by (its group's, or the batch's with `scale_rewards` "batch"); the
    completions of a prompt are consecutive, `num_generations` of them."""
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards: one of {SCALE_REWARDS}, got {scale_rewards!r}")
    groups = rewards.float().view(-1, num_generations)
    baseline = groups.nanmean(dim=1).repeat_interleave(num_generations)
    if scale_rewards == "batch":
        std = nan_std(rewards.float()).expand(rewards.shape) if rewards.numel() > 1 else None
    else:  # "none" keeps the group's, for frac_reward_zero_std
        std = (
            nan_std(groups, dim=1).repeat_interleave(num_generations)
            if num_generations > 1
            else None
        )
    return baseline, torch.zeros_like(baseline) if std is None else std


def group_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str
) -> torch.Tensor:
    """[completions]: each completion's (weighted) reward less its group's mean, scaled by
    `scale_rewards`; 0 where the reward is NaN (unscorable) or the scale is (a group of one)."""
    baseline, std = baseline_and_scale(rewards, num_generations, scale_rewards)
    advantages = rewards.float() - baseline
    if scale_rewards != "none":
        advantages = advantages / (std + STD_EPSILON)
    return torch.nan_to_num(advantages, nan=0.0)


def reward_metrics(
    per_reward: torch.Tensor,
    weights: Sequence[float] | torch.Tensor,
    names: Sequence[str],
    num_generations: int,
    scale_rewards: str,
) -> dict[str, torch.Tensor]:
    """What TRL logs of a generation batch's rewards: `reward` and `reward_std` (the weighted
    rewards' mean and standard deviation, unscorable ones left out), `frac_reward_zero_std` (the
    completions whose scale is 0), and each reward's `rewards/<name>/mean` and `/std` (over the
    completions it answered)."""
    rewards = weighted_rewards(per_reward, weights)
    _, std = baseline_and_scale(rewards, num_generations, scale_rewards)
    metrics = {
        "reward": rewards.nanmean(),
        "reward_std": nan_std(rewards),
        "frac_reward_zero_std": torch.isclose(std, torch.zeros_like(std)).float().mean(),
    }
    for column, name in enumerate(names):
        metrics[f"rewards/{name}/mean"] = per_reward[:, column].float().nanmean()
        metrics[f"rewards/{name}/std"] = nan_std(per_reward[:, column].float())
    return metrics


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """The entropy of each position's next-token distribution (logits [..., vocabulary], divided
    by the sampling temperature), in float32: TRL's `entropy` metric averages it."""
    log_probs = logits.float().log_softmax(dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def reduced(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int,
    dapo_tokens: float | torch.Tensor | None,
) -> torch.Tensor:
    """The per-token losses [completions, tokens] over the completion tokens, by `loss_type`."""
    kept = per_token * mask
    if loss_type == "grpo":
        return (kept.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return kept.sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return kept.sum() / (per_token.size(0) * max_completion_length)
    if loss_type == "dapo":
        tokens = mask.sum().clamp(min=1.0) if dapo_tokens is None else dapo_tokens
        return kept.sum() / tokens
    raise ValueError(f"loss_type: one of {LOSS_TYPES}, got {loss_type!r}")


def nan_extreme(values: torch.Tensor, largest: bool) -> torch.Tensor:
    """The largest (smallest) value that is not NaN; NaN if none is."""
    present = values[~values.isnan()]
    if present.numel() == 0:
        return values.new_tensor(float("nan"))
    return present.max() if largest else present.min()


def clip_metrics(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, low: float, high: float
) -> dict[str, torch.Tensor]:
    """TRL's `clip_ratio/*`: the share of completion tokens whose ratio was clipped below (a
    negative advantage, r < 1 - low), above (a positive one, r > 1 + high), either; and the
    smallest (largest) share below (above) of any completion with tokens."""
    below = ((ratio < 1 - low) & (advantages < 0)).float()
    above = ((ratio > 1 + high) & (advantages > 0)).float()
    either = torch.maximum(below, above)
    tokens = mask.sum(dim=-1)  # 0 for a masked completion: its share is NaN, left out
    return {
        "clip_ratio/low_mean": masked_mean(below, mask),
        "clip_ratio/high_mean": masked_mean(above, mask),
        "clip_ratio/region_mean": masked_mean(either, mask),
        "clip_ratio/low_min": nan_extreme((below * mask).sum(dim=-1) / tokens, largest=False),
        "clip_ratio/high_max": nan_extreme((above * mask).sum(dim=-1) / tokens, largest=True),
    }


def grpo_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor | None,
    ref_per_token_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    beta: float,
    epsilon_low: float,
    epsilon_high: float,
    loss_type: str,
    max_completion_length: int,
    dapo_tokens: float | torch.Tensor | None = None,
    bias_correction_kl: bool = True,
    entropies: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss, TRL's metrics) of one micro-batch; log-probabilities and `entropies` are
    [completions, tokens] (right-padded), `advantages` [completions], `completion_mask` the tokens
    in the loss (a truncated completion's all 0 with `mask_truncated_completions`).

    The loss is the micro-batch's before any division by accumulation steps (the loop divides);
    `dapo_tokens` is the number "dapo" divides by: TRL's completion tokens of the generation
    batch across ranks, divided by the ranks and by its micro-batches (so that, once the loop
    and the ranks average, the optimizer step's loss is a mean over all its tokens); None: this
    micro-batch's own (one micro-batch on one rank). The metrics are means over this
    micro-batch's completion tokens (weight them by its token count across ranks), except
    `clip_ratio/low_min` and `/high_max` (reduce by min and max); `kl` only when beta is not 0,
    `entropy` only given `entropies`."""
    logps = per_token_logps.float()
    old = logps.detach() if old_per_token_logps is None else old_per_token_logps.float()
    mask = completion_mask.float()
    advantage = advantages.float()[:, None]
    ratio = torch.exp(logps - old)
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.minimum(ratio * advantage, clipped * advantage)
    metrics: dict[str, torch.Tensor] = {}
    if beta != 0:
        if ref_per_token_logps is None:
            raise ValueError("grpo_loss: beta is not 0 and no reference log-probabilities")
        ref_gap = ref_per_token_logps.float() - logps
        kl = torch.exp(ref_gap) - ref_gap - 1
        if bias_correction_kl:
            kl = kl * ratio
        per_token = per_token + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), mask)
    loss = reduced(per_token, mask, loss_type, max_completion_length, dapo_tokens)
    if entropies is not None:
        metrics["entropy"] = masked_mean(entropies.detach().float(), mask)
    metrics.update(clip_metrics(ratio.detach(), advantage, mask, epsilon_low, epsilon_high))
    return loss, metrics
