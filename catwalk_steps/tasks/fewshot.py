"""Few-shot contexts, built as lm-evaluation-harness 0.4 builds them for its plain-text (not
chat) prompts: the description, then each example's question, target delimiter, answer and
few-shot delimiter, then the question asked.

Examples are drawn by its samplers. The default one is one `random.Random(fewshot_seed)` per
task, drawing for each evaluated document in turn, so a document's examples depend on the
documents before it (as in lm-evaluation-harness, whose order is the split's). When the
examples come from the split that is evaluated, the document itself is left out: lm-evaluation-
harness then draws one example more and drops the document from the draw, which moves the
generator on by one draw more, and that is followed here too. `first_n` (MMLU's) takes the first
examples of the few-shot split in order.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from .base import TaskDataError

SAMPLERS = ("default", "first_n")


@dataclass(frozen=True)
class Rendered:
    """A row as the task's templates read it: `text` is the question, or (an int) the index of
    the right context when the choices are contexts; `target` is an index or the answer text."""

    text: str | int
    choices: tuple[str, ...]
    target: int | str | None  # None: a generative row whose target list is empty

    @property
    def contexts_per_choice(self) -> bool:
        return isinstance(self.text, int)

    def answer_index(self) -> int | None:
        """The right choice's index; None when the target text is not among the choices."""
        if self.contexts_per_choice:
            return int(self.text)
        if isinstance(self.target, int):
            return self.target
        return self.choices.index(self.target) if self.target in self.choices else None


def example_text(doc: Rendered, target_delimiter: str, fewshot_delimiter: str) -> str:
    """One solved example: question, delimiter, answer, few-shot delimiter."""
    question, answer = example_question(doc), example_answer(doc)
    if answer is None:
        return question  # lm-evaluation-harness writes a question without an answer bare
    return question + target_delimiter + answer + fewshot_delimiter


def contexts(doc: Rendered, prompt: Callable[[str], str]) -> str | tuple[str, ...]:
    """The context(s) of the question asked, as `prompt` puts a question after the description
    and examples (:func:`~.chat.prompt_of`)."""
    if isinstance(doc.text, int):
        return tuple(prompt(choice) for choice in doc.choices)
    return prompt(doc.text)


def example_question(doc: Rendered) -> str:
    """An example's question (the right filled-in context, for contexts per choice)."""
    return doc.choices[doc.text] if isinstance(doc.text, int) else doc.text


def example_answer(doc: Rendered) -> str | None:
    """An example's answer, as its text and an assistant turn say it (None: written without
    one)."""
    if doc.target == "":
        return None
    per_choice = isinstance(doc.text, int)  # then the target is the continuation itself
    if doc.choices and not per_choice and isinstance(doc.target, int):
        return doc.choices[doc.target]
    return str(doc.target)


class FewshotSampler:
    """Draws the examples for each evaluated row, in order.

    :param pool: the rows examples come from (the few-shot split's).
    :param exclude_evaluated: leave the evaluated row out of its own examples (lm-evaluation-
        harness does when the examples come from the evaluated split).
    """

    def __init__(
        self, pool: Sequence[Mapping[str, Any]], seed: int, sampler: str, exclude_evaluated: bool
    ):
        self.pool = pool
        self.random = random.Random(seed)
        self.sampler = sampler
        self.exclude_evaluated = exclude_evaluated

    def draw(self, n: int, row: Mapping[str, Any]) -> list[int]:
        """Indices into the pool of the `n` examples for `row`, in prompt order."""
        if n == 0:
            return []
        evaluated = row if self.exclude_evaluated else None
        if self.sampler == "first_n":
            kept = [i for i in range(len(self.pool)) if evaluated is None or self.pool[i] != row]
            return kept[:n]
        indices = range(len(self.pool))
        if evaluated is None:
            return self.random.sample(indices, n)
        drawn = [i for i in self.random.sample(indices, n + 1) if self.pool[i] != row][:n]
        if len(drawn) < n:  # the row was drawn twice (duplicates): draw again without it
            others = [i for i in indices if self.pool[i] != row]
            drawn = self.random.sample(others, n)
        return drawn


def check_answer(doc: Rendered, where: str) -> None:
    """The label names one of the choices (lm-evaluation-harness would score it wrong)."""
    count = len(doc.choices)
    if doc.contexts_per_choice:
        index, what = cast(int, doc.text), "doc_to_text (the right context)"  # contexts: an int
        if not isinstance(doc.target, str):
            raise TaskDataError(
                f"{where}: doc_to_target must be the continuation text, got {doc.target!r}"
            )
    elif isinstance(doc.target, int):
        index, what = doc.target, "label"
    else:
        if doc.target not in doc.choices:
            raise TaskDataError(
                f"{where}: answer {str(doc.target)[:60]!r} is not one of the {count} choices"
            )
        return
    if isinstance(index, bool) or not 0 <= index < count:
        raise TaskDataError(f"{where}: {what} {index} is out of range for {count} choices")
