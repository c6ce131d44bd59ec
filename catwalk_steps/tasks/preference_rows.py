"""Preference rows as the Hugging Face preference sets write them, read into (prompt, chosen,
rejected) texts:

- text: `{prompt, chosen, rejected}`, each a string (the answers continue the prompt as they
  are, TRL's "standard" form);
- chat with an explicit prompt: `prompt`, `chosen` and `rejected` message lists (TRL's
  "conversational" form: the prompt's turns, then each answer's assistant turn);
- chat with the prompt inside the answers (Anthropic HH, UltraFeedback's `chosen` /
  `rejected`): two conversations whose common first turns are the prompt (TRL's
  `extract_prompt`); a `prompt` text beside them is the first user turn and is not repeated.

Chat rows are rendered with the model's tokenizer's chat template as the chat tasks render
prompts (:mod:`.chat`): the prompt's turns with the assistant's header, and each answer as what
the template writes after it for the whole conversation (TRL's `apply_chat_template` rule). A
row that cannot be read is one line naming its file and line (`where`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import TaskDataError
from .chat import ChatRenderer

FIELDS = ("prompt", "chosen", "rejected")


def is_messages(value: Any) -> bool:
    """A chat: a non-empty list of `{role, content}` messages."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in value)
    )


def form(value: Any) -> str:
    """What a JSON value is, in words ("an object", "a number"): what a field got instead."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "a list" if isinstance(value, list) else f"a {type(value).__name__}"


def check_form(row: Mapping[str, Any], field: str, where: str) -> None:
    """A field given is a text or a list of {role, content} messages: anything else, or a
    message without its role or text, is named as it is (not as a field missing)."""
    value = row.get(field)
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list) or not value:
        got = "an empty list" if isinstance(value, list) else form(value)
        raise TaskDataError(
            f"{where}: field '{field}' must be a text or a list of {{role, content}} messages, "
            f"got {got}"
        )
    for number, message in enumerate(value, start=1):
        if not isinstance(message, Mapping):
            raise TaskDataError(
                f"{where}: field '{field}': message {number} is {form(message)}, not a "
                "{role, content} object"
            )
        for key in ("role", "content"):
            if message.get(key) is None:
                raise TaskDataError(f"{where}: field '{field}': message {number} has no '{key}'")


def checked_row(row: Mapping[str, Any], where: str) -> tuple[Any, Any, Any]:
    """(prompt, chosen, rejected) of a row, as texts or message lists: every field there and of
    one form, a text prompt not empty (its last token predicts each answer's first), and the
    two answers different (nothing to prefer otherwise)."""
    for field in FIELDS:
        check_form(row, field, where)
    chat = is_messages(row.get("chosen"))
    required = ("chosen", "rejected") if chat else FIELDS
    for field in required:
        if row.get(field) is None:
            raise TaskDataError(
                f"{where}: field '{field}' is missing (a row needs {', '.join(FIELDS)})"
            )
    for field in ("chosen", "rejected"):
        if chat != is_messages(row[field]) or (not chat and not isinstance(row[field], str)):
            raise TaskDataError(
                f"{where}: field '{field}' must be a text, or a list of {{role, content}} "
                f"messages as 'chosen' is; got {str(row[field])[:60]!r}"
            )
    prompt = row.get("prompt")
    if not chat and not isinstance(prompt, str):
        raise TaskDataError(f"{where}: field 'prompt' must be a text, got {str(prompt)[:60]!r}")
    if not chat and prompt == "":
        raise TaskDataError(
            f"{where}: field 'prompt' is empty; an answer is scored from the prompt before it "
            "(its first token predicted by the prompt's last)"
        )
    prompt, chosen, rejected = split_prompt(prompt, row["chosen"], row["rejected"], where)
    if chosen == rejected:
        raise TaskDataError(f"{where}: 'chosen' and 'rejected' are the same answer")
    return prompt, chosen, rejected


def split_prompt(prompt: Any, chosen: Any, rejected: Any, where: str) -> tuple[Any, Any, Any]:
    """Chat answers that hold their prompt: the common first turns are the prompt (TRL's
    `extract_prompt`); with none in common, the `prompt` text is the user's turn (left out of an
    answer that starts with it); other rows as they are."""
    if not is_messages(chosen) or is_messages(prompt):
        return prompt, chosen, rejected
    common = 0
    while common < min(len(chosen), len(rejected)) - 1 and chosen[common] == rejected[common]:
        common += 1
    if common == 0:
        if not isinstance(prompt, str) or not prompt:
            raise TaskDataError(
                f"{where}: field 'prompt' is missing ('chosen' and 'rejected' share no first "
                "turn to be the prompt)"
            )
        head = {"role": "user", "content": prompt}
        chosen, rejected = ([m for m in a[:1] if m != head] + a[1:] for a in (chosen, rejected))
        return [head], chosen, rejected
    return list(chosen[:common]), list(chosen[common:]), list(rejected[common:])


def rendered(
    row: tuple[Any, Any, Any], renderer: ChatRenderer | None, where: str
) -> tuple[str, str, str]:
    """A checked row's three texts: a chat row rendered by the model's chat template."""
    prompt, chosen, rejected = row
    if not is_messages(chosen):
        return prompt, chosen, rejected
    if renderer is None:
        raise TaskDataError(
            f"{where}: a chat row (message lists) is rendered by the model's chat template; "
            "give load_task.tokenizer"
        )
    head = renderer.render(list(prompt))
    answers = []
    for answer in (chosen, rejected):
        whole = renderer.tokenizer.apply_chat_template([*prompt, *answer], tokenize=False)
        if not whole.startswith(head):
            raise TaskDataError(
                f"{where}: the chat template of tokenizer '{renderer.tokenizer_name}' does not "
                "write the prompt's turns the same way before an answer"
            )
        answers.append(whole[len(head) :])
    return head, answers[0], answers[1]
