"""What a task's streamed training split (`streaming: true`,
:mod:`catwalk_steps.tasks.streamed`) asks of the steps that read its load step's data, checked
when the step graph is built: training needs `train_steps` (a stream has no length) and
`catwalk::sharded`, and validates on another split; nothing else reads the split (an evaluation
or a reference's log-probabilities read a split whole)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..settings import TrainSettings
from ..training.loaders import ShardedDataLoader


def streamed(task: Any) -> str | None:
    """The split `task` streams (as its load step names it), or None (None: not known yet)."""
    if task is None or task.streaming is None:
        return None
    return task.streaming.split


def check_streamed_training(settings: TrainSettings, task: Any) -> None:
    """A training step on the data of `task`, which may stream its training split."""
    split = streamed(task)
    if split is None:
        return
    what = f"task '{task.name}' streams its split '{split}' (streaming: true)"
    if settings.validation_split == split:
        raise ConfigurationError(
            f"train.validation_split: {what}, which only training reads, a batch at a time; "
            "validate on a split loaded whole"
        )
    if settings.train_split != split:
        return
    if settings.train_steps is None:
        raise ConfigurationError(
            f"train.train_steps: {what}, which has no length; give train_steps (train_epochs "
            "counts passes over a split of known length)"
        )
    if settings.blocks.train_loader.loader_class is not ShardedDataLoader:
        raise ConfigurationError(
            f"train_dataloader.type: {what}, which catwalk::sharded reads; give that type"
        )


def check_not_streamed(task: Any, splits: Iterable[str], field: str, why: str) -> None:
    """A step that reads `splits` of `task`'s data whole (`field`: its key; `why` it does)."""
    split = streamed(task)
    if split is not None and split in splits:
        raise ConfigurationError(
            f"{field}: '{split}' streams (task '{task.name}'.streaming), and {why}; only "
            "training reads a streamed split"
        )
