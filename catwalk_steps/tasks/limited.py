"""A task shrunk for a quick try: its first N instances of each split (`--ext-var limit=N`).

lm-evaluation-harness's `--limit` and this are the same idea: every task of an experiment cut to
its first N instances, so a whole pipeline (training, suites, sweeps, preference tuning, curves
over checkpoints) runs in minutes to see that it runs. The experiment library wraps every task
it is given in this type when the ext var is set (`catwalk_steps/jsonnet/lib/`), so:

- a shrunk run is other steps than the full one (the wrapper is part of each step's identity):
  a cached full result is never taken for a limited one, nor the other way round;
- the results say so (`limit` in a load step's metadata and in an evaluation's result), and
  the reports built from them say it in a line, as lm-evaluation-harness warns that a limited
  run is for testing, not for numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from tango.common.exceptions import ConfigurationError

from .base import ModelTokenizer, Task, TaskInstance
from .wrapped import WrappedTask

LIMITED_TYPE = "catwalk::limited"


@Task.register(LIMITED_TYPE)
class LimitedTask(WrappedTask):
    """`task`, each split cut to its first `limit` instances.

    :param task: the task (a name or a block, as anywhere a task is given).
    :param limit: the instances kept of each split (a number > 0).
    """

    def __init__(self, task: Task, limit: int):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"task.limit: a number of instances > 0, got {limit!r}")
        super().__init__(task)
        self.limit = limit

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[TaskInstance]:
        return list(self.iter_split(split, tokenizer))

    def iter_split(
        self, split: str, tokenizer: ModelTokenizer | None = None
    ) -> Iterator[TaskInstance]:
        """The task's first `limit` instances, as it reads them: a task reading files stops
        after them (never a row past its limit)."""
        return islice(self.task.iter_split(split, tokenizer), self.limit)

    def stream(
        self, splits: Sequence[str], tokenizer: ModelTokenizer | None = None
    ) -> Iterator[tuple[str, Iterator[TaskInstance]]]:
        """The task's splits as it reads them (what the load step stores), each cut at
        `limit`."""
        for split, instances in self.task.stream(splits, tokenizer):
            yield split, islice(instances, self.limit)

    @property  # (the base class has one: never looked up through `__getattr__`)
    def streaming(self) -> Any:
        """The task's streamed training split, if it streams one: read by training as the
        whole task's is, each pass its first `limit` rows (:mod:`.streamed`)."""
        return self.task.streaming

    def stream_instances(
        self, rows: Iterable[tuple[dict[str, Any], str]], tokenizer: ModelTokenizer | None = None
    ) -> Iterator[Any]:
        return self.task.stream_instances(rows, tokenizer)

    def check_splits(self, splits: Sequence[str], field: str) -> None:
        self.task.check_splits(splits, field)

    def evaluation_split(self) -> str:
        return self.task.evaluation_split()

    def evaluation_instances(
        self, split: str | None = None, tokenizer: ModelTokenizer | None = None
    ) -> list[TaskInstance]:
        return self.task.evaluation_instances(split, tokenizer)[: self.limit]

    def describe(self, split: str) -> str:
        return f"{self.task.describe(split)}, its first {self.limit}"

    def det_hash_object(self) -> Any:
        return (LIMITED_TYPE, self.task, self.limit)
