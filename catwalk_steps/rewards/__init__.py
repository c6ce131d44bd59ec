"""Rewards of GRPO's completions, as data (issue 59): a reward is a registered class, named in
the `grpo` block's `reward_funcs` with its keys (:mod:`.base`: :class:`Reward`, a user's own
package adds one with `@Reward.register("my_pkg::name")`); nothing from a data file is ever run.

- :mod:`.builtin`: the task's own metric of a completion, as evaluation scores it
  (`catwalk::task_metric`), and a format as a regular expression (`catwalk::regex_format`);
- :mod:`.settings`: `reward_funcs`, `reward_weights` and `reward_timeout`, read once
  (:class:`RewardSettings`);
- :mod:`.completions`: a batch's completions scored, the [completions, rewards] table GRPO's
  advantages are made of; a reward that raises, returns NaN or what is not a number one line;
- :mod:`.bound`: a reward's call stopped after `reward_timeout` seconds.
"""

from .base import Reward, RewardError, reward_from
from .builtin import RegexFormat, TaskMetric
from .completions import score_completions
from .settings import REWARD_TIMEOUT, RewardSettings

__all__ = [
    "REWARD_TIMEOUT",
    "RegexFormat",
    "Reward",
    "RewardError",
    "RewardSettings",
    "TaskMetric",
    "reward_from",
    "score_completions",
]
