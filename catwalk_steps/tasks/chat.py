"""Prompts as instruct models are evaluated: lm-evaluation-harness 0.4.13's
`--apply_chat_template`, `--fewshot_as_multiturn` and `--system_instruction`.

A task's prompt is a list of turns: a system turn (the system instruction and the task's
description, joined by the few-shot delimiter unless either side has whitespace there), the
examples, the question. With a chat template the turns are rendered by the model's tokenizer
(`apply_chat_template(..., tokenize=False, add_generation_prompt=True)`): each example as a user
turn and an assistant turn (`fewshot_as_multiturn`), or all of them and the question as one user
turn of the plain text. Without one, a system instruction is put before the plain text as it is,
with no separator (lm-evaluation-harness's own rendering).

Where the answer starts, a chat prompt ends with the template's assistant header: a multiple-
choice continuation drops the target delimiter (the header's own whitespace, moved to the
continuation as lm-evaluation-harness moves a context's, takes its place), and a generative
task's trained answer has none either. A BOS that the template writes is kept once: text that
starts with it is tokenized without special tokens (:mod:`catwalk_steps.scoring.sequences`,
:mod:`catwalk_steps.scoring.generation`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import first_line
from .base import ModelTokenizer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatFormat:
    """How a task's prompts are laid out (its keys `apply_chat_template`,
    `fewshot_as_multiturn`, `system_instruction`)."""

    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = False
    system_instruction: str | None = None

    @classmethod
    def of(cls, apply: Any, multiturn: Any, system_instruction: Any, where: str) -> ChatFormat:
        """Checked: booleans, a text; `fewshot_as_multiturn` defaults to `apply_chat_template`
        (as lm-evaluation-harness's command line) and needs it."""
        for key, value in (("apply_chat_template", apply), ("fewshot_as_multiturn", multiturn)):
            if value is not None and not isinstance(value, bool):
                raise ConfigurationError(f"{where}.{key}: true or false, got {value!r}")
        if system_instruction is not None and not isinstance(system_instruction, str):
            raise ConfigurationError(
                f"{where}.system_instruction: a text, got {system_instruction!r}"
            )
        apply = bool(apply)
        if multiturn and not apply:
            raise ConfigurationError(
                f"{where}.fewshot_as_multiturn: true needs apply_chat_template: true (examples "
                "become turns of a chat only in a chat template)"
            )
        return cls(apply, apply if multiturn is None else multiturn, system_instruction)

    def renderer(
        self, tokenizer: ModelTokenizer | None, task: str, system: bool
    ) -> ChatRenderer | None:
        """What renders task `task`'s prompts with the model's tokenizer's chat template (its
        `system` turn too), checked to have one that renders a question; None for plain
        prompts."""
        if not self.apply_chat_template:
            return None
        if tokenizer is None:
            raise ConfigurationError(
                f"task '{task}'.apply_chat_template: no tokenizer to render with (the step "
                "that loads it gives the model's)"
            )
        return ChatRenderer.checked(tokenizer, task, system)

    @property
    def plain(self) -> bool:
        """The task's own text, as without these keys."""
        return self == ChatFormat()

    def settings(self) -> dict[str, Any]:
        """What is given, for the task's identity (nothing when plain: ids stay as they were)."""
        return {} if self.plain else dict(vars(self))


@dataclass(frozen=True)
class Example:
    """A solved example: its question, its answer as an assistant says it, and its plain text
    (question, target delimiter, answer, few-shot delimiter)."""

    question: str
    answer: str | None  # None: a question written without an answer
    text: str


def system_prompt(instruction: str | None, description: str, delimiter: str) -> str:
    """lm-evaluation-harness's `maybe_delimit`: the two joined by `delimiter`, unless one is
    empty, or either side already has whitespace where they meet."""
    if not instruction:
        return description
    if not description:
        return instruction
    if instruction[-1:].isspace() or description[:1].isspace():
        return instruction + description
    return instruction + delimiter + description


def chat_template_of(tokenizer: ModelTokenizer, task: str, rows: bool) -> None:
    """A tokenizer without a chat template cannot render one: one line, before anything runs,
    that says why one is needed (the task's `apply_chat_template`, or its rows are chat
    messages: `rows`), which key named the tokenizer, and what can be done there."""
    if getattr(tokenizer.tokenizer, "chat_template", None):
        return
    named = f"tokenizer '{tokenizer.name}' ({tokenizer.field})"
    what = "a Jinja template, or a file that holds one"
    if tokenizer.field.startswith("load_task."):
        give = f"give load_task.chat_template ({what}; lib.pipeline and lib.preference pass the "
        give += "model block's)"
    else:
        give = f"give the model block a chat_template ({what})"
    if rows:
        raise ConfigurationError(
            f"task '{task}': its rows are chat messages, which the model's chat template "
            f"renders, and {named} has none; {give}, or write the rows as texts"
        )
    if tokenizer.field.startswith("evaluate."):
        give += ", evaluate a model whose tokenizer has one,"
    raise ConfigurationError(
        f"task '{task}'.apply_chat_template: {named} has no chat template; {give} or leave "
        "apply_chat_template out"
    )


# What a template is tried on when the step graph is built: a question it must show.
PROBE = "Is this question in the prompt?"


@dataclass(frozen=True)
class ChatRenderer:
    """The model's tokenizer rendering a task's turns with its chat template. A template that
    fails, or renders nothing of the question, is one line naming the task, the tokenizer and
    the cause (tried once on a probe where the step is built, then on every prompt)."""

    tokenizer: Any
    tokenizer_name: str
    task_name: str
    rows: bool = False  # it renders the task's chat rows (no apply_chat_template key)

    @classmethod
    def checked(
        cls, tokenizer: ModelTokenizer, task: str, system: bool, rows: bool = False
    ) -> ChatRenderer:
        """Its template, tried on a question (after a system turn where the task has one);
        `rows`: the task's rows are chat messages (else it applies a chat template to its
        prompts)."""
        chat_template_of(tokenizer, task, rows)
        renderer = cls(tokenizer.tokenizer, tokenizer.name, task, rows)
        head = [{"role": "system", "content": "Answer."}] if system else []
        text = renderer.render([*head, {"role": "user", "content": PROBE}])
        if PROBE not in text:
            raise renderer.error(
                f"renders {text[:80]!r} for a question {PROBE!r}: no question; give a model "
                "whose template writes each message's content"
            )
        return renderer

    def render(self, messages: list[dict[str, str]]) -> str:
        """The template's text for `messages`, ending with the assistant's header. A template
        that refuses a system turn gets the turns without it (as lm-evaluation-harness does,
        with a warning); one that fails without it too is refused with its first cause."""
        from jinja2.exceptions import TemplateError

        try:
            text = self.apply(messages)
        except TemplateError as e:
            kept = [m for m in messages if m["role"] != "system"]
            if len(kept) == len(messages):
                raise self.failed(e) from None
            try:
                text = self.apply(kept)
            except Exception:
                raise self.failed(e) from None
            logger.warning("The chat template refused a system turn: rendered without it")
        except Exception as e:
            raise self.failed(e) from None
        if not text.strip():
            raise self.error(
                "renders nothing (an empty prompt); give a model whose template writes each "
                "message's content"
            )
        return text

    def apply(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def failed(self, cause: Exception) -> ConfigurationError:
        return self.error(f"fails: {type(cause).__name__}: {first_line(cause)}")

    def error(self, what: str) -> ConfigurationError:
        return ConfigurationError(
            f"task '{self.task_name}'{'' if self.rows else '.apply_chat_template'}: the chat "
            f"template of tokenizer '{self.tokenizer_name}' {what}"
        )


def prompt_of(
    chat: ChatFormat,
    renderer: ChatRenderer | None,
    description: str,
    examples: Sequence[Example],
    fewshot_delimiter: str,
) -> Callable[[str], str]:
    """The context of a question after the description and the examples, as `chat` lays it out
    (`renderer`: the model's tokenizer, when a chat template is applied)."""
    system = system_prompt(chat.system_instruction, description, fewshot_delimiter)
    shots = "".join(example.text for example in examples)
    if not chat.apply_chat_template:
        return lambda question: system + shots + question
    assert renderer is not None, "a chat template is applied by the model's tokenizer"
    head = [{"role": "system", "content": system}] if system else []
    if chat.fewshot_as_multiturn:
        for example in examples:
            head.append({"role": "user", "content": example.question})
            if example.answer is not None:
                head.append({"role": "assistant", "content": example.answer})

        def multiturn(question: str) -> str:
            return renderer.render([*head, {"role": "user", "content": question}])

        return multiturn

    def single_turn(question: str) -> str:
        return renderer.render([*head, {"role": "user", "content": shots + question}])

    return single_turn
