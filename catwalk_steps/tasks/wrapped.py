"""A task made of another (`catwalk::limited`, `catwalk::held_out`): what it does not change is
the other task's (its kind, name, chat rendering, a stage's question to its type)."""

from __future__ import annotations

from typing import Any

from .base import ModelTokenizer, Task


class WrappedTask(Task):
    """`task` with some of its splits changed; everything else asked of it is `task`'s."""

    def __init__(self, task: Task):
        self.task = Task.built(task)
        self.num_fewshot = self.task.num_fewshot

    @property  # the task's kind (the other types': their class's)
    def kind(self) -> str:  # type: ignore[override]
        return self.task.kind

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def renders_chat(self) -> bool:
        return self.task.renders_chat

    def check_tokenizer(self, tokenizer: ModelTokenizer) -> None:
        self.task.check_tokenizer(tokenizer)

    def __getattr__(self, name: str) -> Any:
        """What a stage asks of the task's own type (a preference task's `max_length`, ...)."""
        if name.startswith("__") or name == "task":
            raise AttributeError(name)
        return getattr(self.task, name)
