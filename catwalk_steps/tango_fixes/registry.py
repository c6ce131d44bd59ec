"""Type names in experiment files: an unknown `type` says so and suggests the closest name.

Tango 1.3.2's `Registrable.search_modules` imports every integration while it looks for an
unknown name, and one of them (transformers) fails to import under current transformers, so a
user who misspelt a type saw `ImportError: cannot import name 'modeling_flax_auto'`. The patch
skips the search for our own `catwalk::` prefix, ignores integrations that fail to import, and
raises :class:`UnknownTypeError` when the name is still unknown.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

from tango.common.exceptions import ConfigurationError
from tango.common.registrable import Registrable

from catwalk_startup.patching import patch

from ..errors import closest, rewrite_messages


class UnknownTypeError(ConfigurationError):
    """A `type` in the config that nothing registered; the message suggests the closest."""


def unknown_type_message(cls: type, name: str, registered: list[str]) -> str:
    kind = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()
    close = closest(name, registered)
    hint = f"; did you mean '{close}'?" if close else ""
    return f"unknown {kind} type '{name}'{hint} (registered: {', '.join(registered)})"


# Tango's message for a key that the component does not take. Tango 1.3.2 raises a bare
# ConfigurationError with no field naming the key, so its text is parsed; when the text changes
# the message is Tango's own (tests/test_tango_compat.py fails first).
EXTRA_PARAMETERS = re.compile(r"Extra parameters passed to (\w+): \{'([^']+)'")


def unknown_key_message(message: str) -> str | None:
    """Tango's "Extra parameters passed to TrainRankClassifier: {'train_stpes': 10}" said as
    "catwalk::train: unknown key 'train_stpes'; did you mean 'train_steps'? (keys: ...)"."""
    import inspect

    from tango import Step

    match = EXTRA_PARAMETERS.match(message)
    if match is None:
        return None
    class_name, key = match.groups()
    for name in Step.list_available():
        step_class: type[Step] = Step.resolve_class_name(name)[0]
        if step_class.__name__ != class_name:
            continue
        parameters = inspect.signature(step_class.run).parameters
        keys = sorted(p for p in parameters if p != "self")
        close = closest(key, keys)
        hint = f"did you mean '{close}'? " if close else ""
        return f"{name}: unknown key '{key}'; {hint}(keys: {', '.join(keys)})"
    return None


def unknown_types_say_so() -> None:
    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def search_modules(cls: Any, name: str) -> Any:
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
rewrite_messages(unknown_key_message)
