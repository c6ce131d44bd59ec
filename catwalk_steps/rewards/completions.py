"""A generation batch's completions scored by the rewards: the [completions, rewards] table that
GRPO's arithmetic reads (`objectives.grpo_loss.weighted_rewards`, and `reward_metrics` for
TRL's `rewards/<name>/mean` and `/std`).

What a reward may return, and what it may not:

- a finite number (an int, a float, a bool as 1 or 0): its reward;
- None: "does not apply" (a format reward of another task's prompts): NaN in the table, left
  out of the completion's weighted sum as TRL leaves out a NaN; a completion no reward applies
  to gets advantage 0;
- NaN, infinity, or anything else (a text, a tensor): :class:`~.base.RewardError`, one line
  naming the reward. NaN is refused rather than read as "does not apply": a NaN from a reward
  is far more often arithmetic gone wrong (0/0) than a decision, and a reward that means "does
  not apply" says None;
- a raise, or no return within `reward_timeout` (:mod:`.bound`): one line too, and the run
  stops: a bad reward is a bug to fix, never a number to train on.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Sequence
from typing import Any

import torch

from catwalk_startup.one_line import first_line

from ..tasks.generation import GenerationInstance
from .base import Reward, RewardError
from .bound import RewardTimeout, bounded
from .settings import RewardSettings

RETURNS = "a reward returns a finite number, or None where it does not apply"


def score_completions(
    rewards: RewardSettings,
    instances: Sequence[GenerationInstance],
    completions: Sequence[Sequence[str]],
    prompts: Sequence[int] | None = None,
) -> torch.Tensor:
    """[completions, rewards] float32, a column per reward of `rewards.reward_funcs`, a row per
    completion: prompt i's (the texts `completions[i]`, sampled after `instances[i].context`)
    in order, then prompt i + 1's; NaN where a reward does not apply. `prompts`: what a line
    calls each prompt (its document's index; default its position here)."""
    if len(completions) != len(instances):
        raise ValueError(f"{len(instances)} prompts and {len(completions)} groups of completions")
    prompts = range(len(instances)) if prompts is None else prompts
    funcs, timeout = rewards.reward_funcs, rewards.reward_timeout
    rows = [
        [
            reward_value(reward, index, instance, text, timeout, f"prompt {prompt}, completion {i}")
            for index, reward in enumerate(funcs)
        ]
        for prompt, instance, texts in zip(prompts, instances, completions, strict=True)
        for i, text in enumerate(texts)
    ]
    return torch.tensor(rows, dtype=torch.float32).reshape(-1, len(funcs))


def reward_value(
    reward: Reward,
    index: int,
    instance: GenerationInstance,
    text: str,
    timeout: float,
    where: str,
) -> float:
    """One reward of one completion, within its bound; NaN for "does not apply" (None)."""
    said = f"reward {index} ({reward.name}) on {where}"
    try:
        value = bounded(timeout, lambda: reward(instance, text))
    except RewardTimeout:
        raise RewardError(
            f"{said}: no answer within reward_timeout ({timeout:g} s); it was stopped"
        ) from None
    except Exception as e:
        raise RewardError(f"{said} raised {type(e).__name__}: {first_line(e)}") from e
    return checked(value, said)


def checked(value: Any, said: str) -> float:
    if value is None:
        return math.nan
    if not isinstance(value, numbers.Real):
        shown = f"{reprlib.repr(value)} ({type(value).__name__})"
        raise RewardError(f"{said} returned {shown}: {RETURNS}")
    if not math.isfinite(value):
        raise RewardError(f"{said} returned {float(value)}: {RETURNS}")
    return float(value)
