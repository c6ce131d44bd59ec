"""What a reward is: a registered class (:class:`Reward`, Tango's `Registrable`) built from its
block in the config, called on a prompt's instance and a completion's text; a reward that fails
in the loop is :class:`RewardError`, one line."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from tango.common import Registrable
from tango.common.exceptions import ConfigurationError

from ..components import check_keys, registered_name, resolve_config
from ..errors import one_line_error
from ..tasks.generation import GenerationInstance


@one_line_error
class RewardError(ValueError):
    """A reward that could not score a completion (it raised, returned what is not a finite
    number, or did not return within `reward_timeout`): the message names the reward, its
    index, the prompt and the completion. A reward's failure is never a number."""


class Reward(Registrable):
    """A reward of GRPO's completions: registered by name (`@Reward.register("my_pkg::name")`,
    the package imported by `include_package`), built from its block in the `grpo` block's
    `reward_funcs` (`{type: 'my_pkg::name', ...its constructor's keys}`), the keys data only:
    nothing from a data file is ever run.

    A constructor that refuses a key's value raises `ConfigurationError` whose message starts
    with the key (`pattern: ...`); the settings put the reward's field before it."""

    def __call__(self, instance: GenerationInstance, completion: str) -> float | None:
        """The reward of `completion` (the text sampled after `instance.context`): a finite
        number, or None where this reward does not apply to it (left out of the weighted
        sum, as TRL leaves out a NaN). NaN or infinity is refused (:class:`RewardError`)."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        """Its registered name (`catwalk::task_metric`); a class nobody registered, its own."""
        return registered_name(Reward, type(self)) or type(self).__name__

    def config(self) -> dict[str, Any]:
        """Its block (a run card's record of it); a reward with keys adds them."""
        return {"type": self.name}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config()!r})"

    def check_metrics(self, names: Sequence[str], field: str) -> None:
        """At graph build, given the task's `<metric>,<filter>` names (where they are known):
        one line naming `field` if this reward asks for a metric the task does not have."""


def reward_from(entry: Any, field: str) -> Reward:
    """The reward a `reward_funcs` entry names: a block `{type: <registered name>, ...}` or a
    registered name alone. One line naming `field` for an entry of another form, an unknown
    type (with the registered names), an unknown or missing key, or a refused value."""
    if isinstance(entry, str):
        entry = {"type": entry}
    if not isinstance(entry, Mapping) or not isinstance(entry.get("type"), str):
        raise ConfigurationError(
            f"{field}: a reward: {{type: <registered name>, ...its keys}} or its name "
            f"(registered: {', '.join(sorted(Reward.list_available()))}), got {entry!r}"
        )
    constructor, params = resolve_config(entry, Reward, field)
    check_keys(constructor, params, field)
    missing = [key for key in required_keys(constructor) if key not in params]
    if missing:
        raise ConfigurationError(f"{field}.{missing[0]}: required by {entry['type']}")
    try:
        return constructor(**params)
    except ConfigurationError as e:
        raise ConfigurationError(f"{field}.{e}") from None


def required_keys(constructor: Any) -> list[str]:
    """The keys a reward's constructor takes without a default."""
    parameters = inspect.signature(constructor).parameters.values()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in named and p.default is p.empty]
