"""The rewards of a `grpo` block, read once (:class:`RewardSettings`): TRL's `reward_funcs`
(here registered rewards given by name, never functions from data) and `reward_weights`, and
the bound on a reward's time (`reward_timeout`), each bad entry one line naming it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import is_number
from .base import Reward, reward_from
from .builtin import TaskMetric

REWARD_TIMEOUT = 10.0  # seconds a reward's call may take (reward_timeout's default)
DEFAULT_REWARDS: tuple[Reward, ...] = (TaskMetric(),)  # the task's own primary metric


@dataclass(frozen=True)
class RewardSettings:
    """:ivar reward_funcs: the rewards, each `{type: <registered name>, ...its keys}` or a
        registered name alone (`catwalk::task_metric`, `catwalk::regex_format`, or one a
        user's package registers); left out: the task's own metric, as evaluation scores it.
    :ivar reward_weights: each reward's weight in a completion's reward (TRL's; null: 1 each).
    :ivar reward_timeout: the seconds a reward's call may take before it is stopped, one line
        naming it (a reward that hangs stops the run instead of the run hanging)."""

    reward_funcs: tuple[Reward, ...] = DEFAULT_REWARDS
    reward_weights: tuple[float, ...] | None = None
    reward_timeout: float = REWARD_TIMEOUT

    @classmethod
    def key_names(cls) -> list[str]:
        """Its keys in a `grpo` block."""
        return [f.name for f in fields(cls)]

    @classmethod
    def of(cls, given: Mapping[str, Any], field: str = "model.grpo") -> RewardSettings:
        """From the block `field` (only its reward keys are read), each reward built once:
        an unknown type, key or value one line naming it."""
        given = {key: given[key] for key in cls.key_names() if key in given}
        if "reward_funcs" in given:
            given["reward_funcs"] = rewards_from(given["reward_funcs"], f"{field}.reward_funcs")
        if isinstance(given.get("reward_weights"), list):
            given["reward_weights"] = tuple(given["reward_weights"])
        settings = cls(**given)
        settings.check(field)
        return settings

    @property
    def weights(self) -> tuple[float, ...]:
        """Each reward's weight (1 each when `reward_weights` is left out, as TRL's)."""
        given = self.reward_weights or (1.0,) * len(self.reward_funcs)
        return tuple(float(weight) for weight in given)

    @property
    def names(self) -> tuple[str, ...]:
        """What the metrics call each reward (`rewards/<name>/mean`): its registered name after
        `::`; names that repeat followed by the reward's index (`regex_format[1]`)."""
        short = [reward.name.split("::")[-1] for reward in self.reward_funcs]
        return tuple(n if short.count(n) == 1 else f"{n}[{i}]" for i, n in enumerate(short))

    def check(self, field: str) -> None:
        funcs = self.reward_funcs
        if not funcs or not all(isinstance(reward, Reward) for reward in funcs):
            raise ConfigurationError(f"{field}.reward_funcs: at least one reward, got {funcs!r}")
        self.check_weights(field)
        if not (is_number(self.reward_timeout) and self.reward_timeout > 0):
            raise ConfigurationError(
                f"{field}.reward_timeout: a number of seconds > 0, got {self.reward_timeout!r}"
            )

    def check_weights(self, field: str) -> None:
        weights, count = self.reward_weights, len(self.reward_funcs)
        if weights is None:
            return
        if not isinstance(weights, tuple):
            raise ConfigurationError(
                f"{field}.reward_weights: a list of numbers, one per reward, got {weights!r}"
            )
        if len(weights) != count:
            names = ", ".join(reward.name for reward in self.reward_funcs)
            raise ConfigurationError(
                f"{field}.reward_weights: {len(weights)} weights for {count} reward"
                f"{'s' if count != 1 else ''} ({names}); give one per reward"
            )
        for index, weight in enumerate(weights):
            if not is_number(weight):
                raise ConfigurationError(
                    f"{field}.reward_weights[{index}]: a number, got {weight!r}"
                )

    def check_metrics(self, names: Sequence[str], field: str) -> None:
        """At graph build, where the task's `<metric>,<filter>` names are known: each reward
        that asks for a metric asks for one of them."""
        for index, reward in enumerate(self.reward_funcs):
            reward.check_metrics(names, f"{field}.reward_funcs[{index}]")

    def as_config(self) -> dict[str, Any]:
        weights = self.reward_weights
        return {
            "reward_funcs": [reward.config() for reward in self.reward_funcs],
            "reward_weights": None if weights is None else list(weights),
            "reward_timeout": self.reward_timeout,
        }


def rewards_from(given: Any, field: str) -> tuple[Reward, ...]:
    """Each entry of `reward_funcs` built (:func:`~.base.reward_from`)."""
    if not isinstance(given, (list, tuple)) or not given:
        raise ConfigurationError(
            f"{field}: a list of rewards, each {{type: <registered name>, ...}} or its name "
            f"(registered: {', '.join(sorted(Reward.list_available()))}), got {given!r}"
        )
    return tuple(reward_from(entry, f"{field}[{index}]") for index, entry in enumerate(given))
