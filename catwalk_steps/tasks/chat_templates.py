"""A chat template given by a key (`chat_template` on the model block, on `catwalk::load_task`):
for a tokenizer that has none of its own (`catwalk::byte_level`, a `tokenizer.json` file, a
local directory without `chat_template.jinja`), or to replace the one it has.

The value is the Jinja template itself (text with `{{` or `{%` in it, as in a tokenizer's
`chat_template.jinja`) or the path of a file that holds one. It is read and its syntax checked
where the key is read; put on a tokenizer, it is tried on a user message (one line if it fails,
renders nothing or leaves the message out). A model trained with it saves it with its tokenizer
(`chat_template.jinja`), so the trained model renders as it was trained.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import first_line
from .chat import PROBE

MARKS = ("{{", "{%")  # what makes a value the template itself rather than a file's path


@dataclass(frozen=True)
class ChatTemplate:
    """A `chat_template` key's template, read and checked once.

    :ivar text: the Jinja template.
    :ivar field: the key that gave it (`model.chat_template`), for messages.
    :ivar file: the file it was read from; None for a template given as text.
    """

    text: str
    field: str
    file: str | None = None

    @classmethod
    def of(cls, value: Any, field: str) -> ChatTemplate | None:
        """The template a key gives (None when left out): its text, or its file's, checked."""
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(
                f"{field}: a Jinja chat template, or the path of a file that holds one; got "
                f"{value!r}"
            )
        if any(mark in value for mark in MARKS):
            return cls(value, field).parsed()
        path = Path(value).expanduser()
        if not path.is_file():
            raise ConfigurationError(
                f"{field}: '{value}': no such file (a chat template is the path of a Jinja "
                "file, or the template itself, with {{ ... }} or {% ... %} in it)"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = first_line(e)
            raise ConfigurationError(f"{field}: '{value}': cannot be read ({reason})") from None
        if not text.strip():
            raise ConfigurationError(f"{field}: '{value}': the file is empty")
        return cls(text, field, value).parsed()

    @property
    def where(self) -> str:
        """The key, and the file when the template came from one."""
        return self.field if self.file is None else f"{self.field} ('{self.file}')"

    def parsed(self) -> ChatTemplate:
        """Itself, its Jinja syntax checked (one line naming the line of a mistake)."""
        from jinja2 import TemplateSyntaxError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        try:
            ImmutableSandboxedEnvironment().parse(self.text)
        except TemplateSyntaxError as e:
            raise ConfigurationError(
                f"{self.where}: not a Jinja template: {e.message} (line {e.lineno})"
            ) from None
        return self

    def applied(self, tokenizer: Any) -> Any:
        """A copy of `tokenizer` with this template, tried on a user message (the tokenizer
        given is shared, and keeps its own)."""
        templated = copy.deepcopy(tokenizer)
        templated.chat_template = self.text
        message = [{"role": "user", "content": PROBE}]
        try:
            text = templated.apply_chat_template(
                message, tokenize=False, add_generation_prompt=True
            )
        except Exception as e:
            raise ConfigurationError(
                f"{self.where}: the template fails on a user message: {type(e).__name__}: "
                f"{first_line(e)}"
            ) from None
        if PROBE not in str(text):
            raise ConfigurationError(
                f"{self.where}: the template renders {str(text)[:80]!r} for a user message "
                f"{PROBE!r}; it must write each message's content"
            )
        return templated
