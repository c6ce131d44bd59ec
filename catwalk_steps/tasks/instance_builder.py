"""One (sub)task's rows made instances as they are read: templates applied, few-shot examples
drawn, contexts joined, labels checked (for :class:`~.templated.TemplatedTask` and, with its
own rendering, the generative tasks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, Protocol, cast

from . import base
from .base import MultipleChoiceInstance, TaskDataError
from .chat import ChatFormat, ChatRenderer, Example, prompt_of
from .fewshot import (
    FewshotSampler,
    Rendered,
    check_answer,
    contexts,
    example_answer,
    example_question,
    example_text,
)
from .file_rows import Row
from .sources import RowSource
from .spec import TaskSpec
from .templates import TemplateError


class BuiltTask(Protocol):
    """What the builder reads of the task it builds instances for (a
    :class:`~.templated.TemplatedTask`, or a generative task): its settings, never its type."""

    spec: TaskSpec
    chat: ChatFormat
    max_instances: int | None
    num_fewshot: int
    fewshot_seed: int

    @property
    def name(self) -> str: ...

    def fewshot_split_of(self, source: RowSource, split: str) -> str: ...


class InstanceBuilder:
    """One (sub)task's rows made instances: templates applied, examples drawn, contexts
    joined, labels checked."""

    def __init__(self, task: BuiltTask, source: RowSource, subtask: str | None):
        self.task, self.spec, self.source, self.subtask = task, task.spec, source, subtask
        self.templates = task.spec.templates()
        self.extra = {"subtask": subtask} if subtask else {}

    def build(self, split: str, renderer: ChatRenderer | None) -> Iterator[base.TaskInstance]:
        """The split's instances, each made as its row is read; `renderer`: the model's chat
        template, for a task with one."""
        rows = self.source.iter_rows(split, self.task.max_instances)
        first = next(rows, None)
        if first is None:
            raise TaskDataError(f"{self.source.describe(split)}: split '{split}' is empty")
        yield from self.made(chain([first], rows), renderer, self.sampler(split), split)

    def made(
        self,
        rows: Iterable[Row],
        renderer: ChatRenderer | None,
        sampler: FewshotSampler | None = None,
        split: str = "",
    ) -> Iterator[base.TaskInstance]:
        """Each row's instance as it comes (a streamed split's rows too); `sampler`: the
        few-shot examples drawn for it from `split`'s pool."""
        pool: Sequence[Mapping[str, Any]] = sampler.pool if sampler is not None else []
        examples: dict[int, Example] = {}
        task, delimiter = self.task, self.spec.fewshot_delimiter
        pool_split = task.fewshot_split_of(self.source, split) if sampler else ""
        for row, where in rows:
            doc = self.render(row, where)
            description = self.templates["description"].apply(row, self.extra)
            shots = []
            for i in sampler.draw(task.num_fewshot, row) if sampler else []:
                if i not in examples:
                    named = f"few-shot example {self.source.where(pool_split, i)}"
                    example = self.render(pool[i], named)
                    text = self.example(example)
                    examples[i] = Example(example_question(example), example_answer(example), text)
                shots.append(examples[i])
            prompt = prompt_of(task.chat, renderer, description, shots, delimiter)
            yield self.instance(doc, prompt)

    @property
    def target_delimiter(self) -> str:
        """Before an answer: none after a chat template's assistant header."""
        return "" if self.task.chat.apply_chat_template else self.spec.target_delimiter

    def example(self, doc: Rendered) -> str:
        """A solved example: question, target delimiter, answer, few-shot delimiter."""
        return example_text(doc, self.spec.target_delimiter, self.spec.fewshot_delimiter)

    def sampler(self, split: str) -> FewshotSampler | None:
        if self.task.num_fewshot == 0:
            return None
        pool_split = self.task.fewshot_split_of(self.source, split)
        pool = self.source.rows(pool_split)
        exclude = self.excludes_evaluated()
        if len(pool) < self.task.num_fewshot + exclude:
            where = self.source.describe(pool_split)
            available = (
                f"each document draws from the other {len(pool) - 1} of the {len(pool)} rows "
                f"of {where}"
                if exclude
                else f"{where} has only {len(pool)} examples"
            )
            raise TaskDataError(
                f"task '{self.task.name}': num_fewshot {self.task.num_fewshot}, but {available}"
            )
        return FewshotSampler(pool, self.task.fewshot_seed, self.spec.fewshot_sampler, exclude)

    def excludes_evaluated(self) -> bool:
        """lm-evaluation-harness leaves the evaluated row out of its own examples when the
        few-shot split is the test split (None when there is none: the examples then come from
        the evaluated split)."""
        test = self.spec.test_split if self.source.has(self.spec.test_split) else None
        return self.spec.fewshot_split == test

    def render(self, row: Mapping[str, Any], where: str) -> Rendered:
        values = {}
        for key in ("doc_to_text", "doc_to_choice", "doc_to_target"):
            try:
                values[key] = self.templates[key].apply(row, self.extra)
            except (TemplateError, KeyError) as e:
                raise TaskDataError(f"task '{self.task.name}': {where}: {key}: {e}") from None
        choices = values["doc_to_choice"]
        if isinstance(choices, dict):
            choices = list(choices.values())
        if (
            not isinstance(choices, (list, tuple))
            or not choices
            or not all(isinstance(c, str) for c in choices)
        ):
            raise TaskDataError(
                f"task '{self.task.name}': {where}: doc_to_choice must give a non-empty list of "
                f"strings, got {str(choices)[:80]}"
            )
        doc = Rendered(values["doc_to_text"], tuple(choices), values["doc_to_target"])
        check_answer(doc, f"task '{self.task.name}': {where}")
        return doc

    def instance(self, doc: Rendered, prompt: Callable[[str], str]) -> base.TaskInstance:
        delimiter = self.target_delimiter
        if doc.contexts_per_choice:
            continuation = delimiter + str(doc.target)
            choices = (continuation,) * len(doc.choices)
        else:
            choices = tuple(delimiter + choice for choice in doc.choices)
        return MultipleChoiceInstance(
            context=contexts(doc, prompt),
            choices=choices,
            label=cast(int, doc.answer_index()),  # checked in render (check_answer)
            choice_chars=tuple(len(choice) for choice in doc.choices),
            subtask=self.subtask,
        )
