"""What a task is: multiple-choice instances, loaded by split, and the error bad data raises."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tango.common import Registrable
from tango.common.exceptions import ConfigurationError

from ..errors import one_line_error


@one_line_error
class TaskDataError(ValueError):
    """Task data that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True)
class MultipleChoiceInstance:
    """One question: a context, its candidate continuations, and the index of the right one."""

    context: str
    choices: tuple[str, ...]
    label: int


class Task(Registrable):
    """A multiple-choice task: loads named splits of instances."""

    @classmethod
    def from_params(cls, params_: Any, *args: Any, **kwargs: Any) -> Task:
        """Tango's construction, with a message that says what to do about keys of another
        task type (overriding only `type` keeps the old task's keys: replace the whole block)."""
        try:
            return super().from_params(params_, *args, **kwargs)  # type: ignore[misc]
        except ConfigurationError as e:
            extra = re.fullmatch(r"Extra parameters passed to (\w+): (.*)", str(e))
            if extra is None:
                raise
            raise ConfigurationError(
                f"task: {extra[1]} does not take {extra[2]}; when changing the task's type, "
                'replace the whole task block, e.g. -o \'{"steps.data.task": '
                '{"type": "catwalk::piqa", "data_dir": "/data/piqa"}}\''
            ) from None

    def load(self, splits: Sequence[str]) -> dict[str, list[MultipleChoiceInstance]]:
        """Returns each requested split, in order; an unknown or empty split is an error."""
        result = {}
        for split in splits:
            instances = self.load_split(split)
            if not instances:
                raise TaskDataError(f"{self.describe(split)}: split '{split}' is empty")
            result[split] = instances
        return result

    def load_split(self, split: str) -> list[MultipleChoiceInstance]:
        raise NotImplementedError

    def describe(self, split: str) -> str:
        """Where a split comes from, for error messages."""
        return f"{type(self).__name__} split '{split}'"


def dataset_fingerprint(splits: Mapping[str, Sequence[MultipleChoiceInstance]]) -> str:
    """SHA-256 of a dataset's splits (their names, instances and order): two nodes that built
    the same data from the same config have the same fingerprint."""
    import hashlib
    import json
    from dataclasses import asdict

    payload = {name: [asdict(i) for i in instances] for name, instances in splits.items()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
