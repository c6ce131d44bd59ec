"""A generation request: the prompt the model continues, where its answer stops, and how the
answer is scored (:mod:`.answers`); what a model trained on it learns to write. Built by the
generative tasks (:mod:`.generative`) and the synthetic task; the generative kind
(:mod:`catwalk_steps.kinds.generative`) batches, answers and scores it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from tango.common.exceptions import ConfigurationError

from .answers import AnswerScoring


@dataclass(frozen=True)
class GenerationInstance:
    """One generation request and how its answer is scored.

    :ivar context: the prompt the model continues.
    :ivar targets: the right answer(s): a match with any one counts (a task whose targets are
        lists, as lm-evaluation-harness decides by its first document; else the one target).
    :ivar until: stop sequences: the answer is cut before the first one.
    :ivar max_gen_toks: at most this many tokens are generated.
    :ivar answer: what training teaches the model to write after the prompt (:func:`answer_text`:
        the first target and the first stop sequence); None when the row has no target.
    :ivar training: a training example: its batches hold the prompt and `answer`, for the loss
        (:meth:`~catwalk_steps.kinds.generative.Generative.training_instances`).
    :ivar no_answer: for a row without `answer`, where it is and why (`file:line: doc_to_target
        is empty`), for training to name it; None otherwise (and then not in its record).
    """

    context: str
    targets: tuple[str, ...]
    until: tuple[str, ...]
    max_gen_toks: int
    scoring: AnswerScoring
    answer: str | None = None
    training: bool = False
    no_answer: str | None = None
    kind: ClassVar[str] = "generative"  # catwalk_steps.kinds.generative

    def pairs(self) -> list[tuple[str, str]]:
        """What its size is counted from (sharing work out by size)."""
        return [(self.context, "")]

    def record(self) -> dict[str, Any]:
        """As data (JSON: a stored split, a dataset's fingerprint): the scoring as the lists it
        was read from."""
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "scoring"}
        if self.no_answer is None:  # the stored form of rows with an answer, as it was
            del row["no_answer"]
        return {**row, "kind": self.kind, "scoring": self.scoring.source}

    def score(self, response: str) -> dict[str, Any]:
        """The filtered answers and their scores (:meth:`AnswerScoring.score`)."""
        return self.scoring.score(response, self.targets)


def answer_text(target: str | None, delimiter: str, until: tuple[str, ...]) -> str | None:
    """What a model trained on a row learns to write: the target after the target delimiter (as
    a few-shot example shows it), then the first stop sequence, so that it learns to stop where
    generation cuts (with no stop sequence, training ends it with the end-of-text token).
    None for no target (an empty list or text): nothing to learn."""
    if not target:
        return None
    return f"{delimiter}{target}{until[0] if until else ''}"


def prompt_room(max_gen_toks: int, max_length: int, what: str, length: str) -> int:
    """The tokens a prompt may have beside its answer (lm-evaluation-harness cuts prompts to
    `max_length - max_gen_toks`); none is an error naming `what` and the `length` it has."""
    room = max_length - max_gen_toks
    if room <= 0:
        raise ConfigurationError(
            f"{what}.max_gen_toks: {max_gen_toks} tokens leave no room for the prompt in "
            f"{length}; give the task a smaller max_gen_toks"
        )
    return room
