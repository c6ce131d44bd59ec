"""GRPO (RLVR, issue 59), its settings: the `grpo` block (:class:`GrpoSettings`), under TRL
1.16's `GRPOConfig` names and defaults, each bad key or value one line naming it; its rewards
(`reward_funcs`, `reward_weights`, `reward_timeout`) read by the rewards room
(:class:`~catwalk_steps.rewards.RewardSettings`). The loss and the advantages, pure:
:mod:`.grpo_loss`.

The objective (:class:`Grpo`, `objective: 'grpo'`) trains on a generative task's prompts: the
loop samples G completions of each (`catwalk_steps.training.sampled`), the rewards score them, and
the model's forward takes the completions with their advantages
(:mod:`catwalk_steps.scoring.grpo_objective`). With `num_iterations` (μ) > 1 each generation
batch is trained on μ times, its old log-probabilities the sampling policy's. `beta` > 0 adds
TRL's k3 KL term to the reference (:meth:`Grpo.reference`): the base with the model's adapter
off, else a frozen model beside the policy (its starting weights, or `catwalk::train`'s
`reference`), whose log-probabilities the loop computes once per generation batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from ..errors import is_number
from ..rewards import RewardSettings
from .base import ChoiceScores, Examples, Objective, Reference, block_keys
from .grpo_loss import LOSS_TYPES, SCALE_REWARDS
from .lm import right_answer_loss

# TRL's other loss types, said so by name when asked for (they are not implemented here).
OTHER_LOSS_TYPES = ("cispo", "sapo", "luspo", "vespo")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class GrpoSettings:
    """:ivar num_generations: completions sampled per prompt (G, at least 2: a group's rewards
        are compared with each other).
    :ivar temperature: sampling temperature; the log-probabilities of the loss are of the logits
        divided by it.
    :ivar top_p: nucleus sampling, in (0, 1] (1: off).
    :ivar top_k: top-k sampling (0: off).
    :ivar max_completion_length: the most tokens sampled per completion (and "dr_grpo"'s divisor).
    :ivar beta: the KL term's weight (0: no reference model).
    :ivar epsilon: the ratio's lower clip, 1 - epsilon, in [0, 1).
    :ivar epsilon_high: its upper clip, 1 + epsilon_high (None: epsilon; DAPO's 0.28).
    :ivar num_iterations: updates per generation batch (mu; above 1 the old log-probabilities
        are the sampling policy's).
    :ivar scale_rewards: "group", "batch" or "none" (TRL's True and False: "group", "none").
    :ivar loss_type: "grpo", "bnpo", "dr_grpo" or "dapo" (TRL 1.16's default).
    :ivar mask_truncated_completions: completions cut at `max_completion_length` left out of
        the loss.
    :ivar rewards: the block's `reward_funcs`, `reward_weights` and `reward_timeout`, read
        (:class:`~catwalk_steps.rewards.RewardSettings`): the task's own metric by default."""

    num_generations: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_completion_length: int = 512
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float | None = None
    num_iterations: int = 1
    scale_rewards: str = "group"
    loss_type: str = "dapo"
    mask_truncated_completions: bool = False
    rewards: RewardSettings = RewardSettings()

    @classmethod
    def key_names(cls) -> list[str]:
        """Its keys in the block: its own fields, then the rewards' (in place of `rewards`)."""
        own = [f.name for f in fields(cls) if f.name != "rewards"]
        return own + RewardSettings.key_names()

    @classmethod
    def of(cls, given: Mapping[str, Any] | None, field: str = "model.grpo") -> GrpoSettings:
        given = block_keys(cls, given, field, cls.key_names())
        reward_keys = {key: given.pop(key) for key in RewardSettings.key_names() if key in given}
        given["rewards"] = RewardSettings.of(reward_keys, field)
        scale = given.get("scale_rewards")
        if isinstance(scale, bool):  # TRL's spelling of "group" and "none"
            given["scale_rewards"] = "group" if scale else "none"
        settings = cls(**given)
        settings.check(field)
        return settings

    @property
    def clip_high(self) -> float:
        """The upper clip's epsilon."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    def check(self, field: str) -> None:
        self.check_sampling(field)
        self.check_training(field)
        self.rewards.check(field)

    def check_sampling(self, field: str) -> None:
        if not (_integer(self.num_generations) and self.num_generations >= 2):
            raise ConfigurationError(
                f"{field}.num_generations: an integer >= 2 (a group's completions are compared "
                f"with each other), got {self.num_generations!r}"
            )
        if not (is_number(self.temperature) and self.temperature > 0):
            raise ConfigurationError(f"{field}.temperature: a number > 0, got {self.temperature!r}")
        if not (is_number(self.top_p) and 0 < self.top_p <= 1):
            raise ConfigurationError(f"{field}.top_p: a number in (0, 1], got {self.top_p!r}")
        if not (_integer(self.top_k) and self.top_k >= 0):
            raise ConfigurationError(f"{field}.top_k: an integer >= 0 (0: off), got {self.top_k!r}")
        length = self.max_completion_length
        if not (_integer(length) and length >= 1):
            raise ConfigurationError(
                f"{field}.max_completion_length: an integer >= 1, got {length!r}"
            )

    def check_training(self, field: str) -> None:
        if not (is_number(self.beta) and self.beta >= 0):
            raise ConfigurationError(f"{field}.beta: a number >= 0, got {self.beta!r}")
        if not (is_number(self.epsilon) and 0 <= self.epsilon < 1):
            raise ConfigurationError(f"{field}.epsilon: a number in [0, 1), got {self.epsilon!r}")
        high = self.epsilon_high
        if high is not None and not (is_number(high) and high >= 0):
            raise ConfigurationError(f"{field}.epsilon_high: a number >= 0 or null, got {high!r}")
        if not (_integer(self.num_iterations) and self.num_iterations >= 1):
            raise ConfigurationError(
                f"{field}.num_iterations: an integer >= 1, got {self.num_iterations!r}"
            )
        if self.scale_rewards not in SCALE_REWARDS:
            raise ConfigurationError(
                f"{field}.scale_rewards: one of {', '.join(SCALE_REWARDS)} (or true, false), "
                f"got {self.scale_rewards!r}"
            )
        if self.loss_type not in LOSS_TYPES:
            other = " (a TRL loss type this package does not train)"
            raise ConfigurationError(
                f"{field}.loss_type: one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}"
                f"{other if self.loss_type in OTHER_LOSS_TYPES else ''}"
            )
        if not isinstance(self.mask_truncated_completions, bool):
            raise ConfigurationError(
                f"{field}.mask_truncated_completions: true or false, "
                f"got {self.mask_truncated_completions!r}"
            )

    def as_config(self) -> dict[str, Any]:
        """Its keys as the block gives them (the rewards as their blocks)."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rewards"}
        return {**own, **self.rewards.as_config()}


class Grpo(Objective):
    """GRPO on a generative task's prompts (its examples: a prompt with a verifiable answer),
    its completions sampled in the loop."""

    name = "grpo"
    trains_on = (Examples.ANSWERS,)
    settings = GrpoSettings
    samples = True

    def reference(self, adapter: Any, block: Any = None) -> Reference | None:
        """None with beta 0 (no KL term); with an adapter its base with the adapter off (the
        one rule, :func:`~.base.reference_from`, as DPO's); else a frozen model, as TRL's
        GRPOTrainer keeps one for a full model."""
        if GrpoSettings.of(block).beta == 0:
            return None
        return Reference.ADAPTER_OFF if adapter is not None else Reference.MODEL

    def updates_per_batch(self, block: Any) -> int:
        """μ: each generation batch (one step's prompts) gives `num_iterations` optimizer
        steps, as TRL counts them."""
        return GrpoSettings.of(block).num_iterations

    def choice_loss(self, choices: ChoiceScores) -> torch.Tensor:
        """A model trained by GRPO, scored on choices (an evaluation): the right answer's NLL,
        as `lm`'s."""
        return right_answer_loss(choices)


GRPO = Grpo()
