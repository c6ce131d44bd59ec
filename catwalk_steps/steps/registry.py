"""Type names in experiment files: an unknown `type` says so and suggests the closest name.

Tango 1.3.2's `Registrable.search_modules` imports every integration while it looks for an
unknown name, and one of them (transformers) fails to import under current transformers, so a
user who misspelt a type saw `ImportError: cannot import name 'modeling_flax_auto'`. The patch
skips the search for our own `catwalk::` prefix, ignores integrations that fail to import, and
raises :class:`UnknownTypeError` when the name is still unknown.
"""

from __future__ import annotations

import contextlib
import difflib
import re

from tango.common.exceptions import ConfigurationError
from tango.common.registrable import Registrable

from .patching import patch


class UnknownTypeError(ConfigurationError):
    """A `type` in the config that nothing registered; the message suggests the closest."""


def unknown_type_message(cls: type, name: str, registered: list[str]) -> str:
    kind = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()
    # Case-insensitively: 'torch::Adamw' is 'torch::AdamW', not 'torch::Adam'.
    lowered = {r.lower(): r for r in registered}
    close = [lowered[c] for c in difflib.get_close_matches(name.lower(), lowered, n=1, cutoff=0.6)]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} type '{name}'{hint} (registered: {', '.join(registered)})"


def unknown_types_say_so() -> None:
    def wrap(original):
        def search_modules(cls, name: str):
            ordinary = not isinstance(name, str) or name == "ref" or "::" not in name
            if ordinary or name == cls.default_implementation or name in cls.list_available():
                return original(cls, name)
            if not name.startswith("catwalk::"):
                with contextlib.suppress(ImportError):
                    original(cls, name)
                if name in cls.list_available():
                    return None
            raise UnknownTypeError(unknown_type_message(cls, name, sorted(cls.list_available())))

        return search_modules

    patch(Registrable, "search_modules", "unknown_types_say_so", wrap)


unknown_types_say_so()
