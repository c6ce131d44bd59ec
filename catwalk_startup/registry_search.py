"""Type names in experiment files, from any directory: the one wrap of Tango's
`Registrable.search_modules`, made when Tango's registry is imported (before the package is).

- A name under our prefix (`catwalk::`) imports `catwalk_steps` first, which registers it, and
  is found before Tango searches. Tango finds a registered name only in what it has imported:
  `include_package` of tango.yml or `-i`; from a directory without our tango.yml, an
  experiment's `catwalk::train` sent Tango's search through every module it knows, and one of
  its integrations (transformers) fails to import under transformers 5: a 55-line
  `ImportError: cannot import name 'modeling_flax_auto'` (and from the second such search on,
  Tango's refusal to register that integration's names again).
- A name still unknown is :class:`UnknownTypeError`, one line with the closest registered name
  (a misspelt type showed that same ImportError): other namespaces (`torch::`) are searched as
  Tango searches them, integrations that fail to import passed over.

Imported only once Tango's registry is (:func:`catwalk_startup.patch_registrable`).
"""

from __future__ import annotations

import contextlib
import importlib
import re
import types
from typing import Any

from tango.common.exceptions import ConfigurationError

from .one_line import closest
from .patching import patch

PREFIX = "catwalk::"
PACKAGE = "catwalk_steps"
PATCH = "catwalk:: types import catwalk_steps; unknown types said so"


class UnknownTypeError(ConfigurationError):
    """A `type` in the config that nothing registered; the message suggests the closest."""


def unknown_type_message(cls: type, name: str, registered: list[str]) -> str:
    kind = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()
    close = closest(name, registered)
    hint = f"; did you mean '{close}'?" if close else ""
    return f"unknown {kind} type '{name}'{hint} (registered: {', '.join(registered)})"


def patch_registrable(module: types.ModuleType) -> None:
    """Wraps `module.Registrable.search_modules` (tango.common.registrable, ai2-tango 1.3.2)."""
    patch(module, "Registrable.search_modules", PATCH, found_or_said)


def found_or_said(original: Any) -> Any:
    def search_modules(cls: Any, name: Any) -> Any:
        """Tango's search for a name without a namespace (and `ref`), or one registered; ours
        imported for a `catwalk::` name, Tango's search for another; else one line."""
        ordinary = not isinstance(name, str) or name == "ref" or "::" not in name
        if ordinary or name == cls.default_implementation or name in cls.list_available():
            return original(cls, name)
        if name.startswith(PREFIX):
            importlib.import_module(PACKAGE)  # registers every name of ours
        else:  # an integration that failed to import once registers its names again the
            # next time, and Tango refuses that (a ConfigurationError: "already registered")
            with contextlib.suppress(ImportError, ConfigurationError):
                original(cls, name)
        if name in cls.list_available():
            return None
        raise UnknownTypeError(unknown_type_message(cls, name, sorted(cls.list_available())))

    return search_modules
