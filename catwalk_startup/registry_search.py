"""`catwalk::` type names found from any directory.

Tango finds a registered name only in what it has imported: `include_package` of tango.yml or
`-i`. From a directory without our tango.yml, an experiment's `catwalk::train` sent Tango's
`Registrable.search_modules` through every module it knows, and one of its integrations
(transformers) fails to import under transformers 5: a 55-line `ImportError: cannot import
name 'modeling_flax_auto'`. Here a name under our prefix imports `catwalk_steps` first (which
registers it, and applies its own fixes of Tango) and is found before Tango searches.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from .patching import patch

PREFIX = "catwalk::"
PACKAGE = "catwalk_steps"


def patch_registrable(module: types.ModuleType) -> None:
    """Wraps `module.Registrable.search_modules` (tango.common.registrable, ai2-tango 1.3.2)."""

    def wrap(original: Any) -> Any:
        def search_modules(cls: Any, name: Any) -> Any:
            """Ours imported first for a `catwalk::` name; Tango's search for anything else."""
            if isinstance(name, str) and name.startswith(PREFIX) and PACKAGE not in sys.modules:
                importlib.import_module(PACKAGE)
                if name in module.Registrable._registry[cls]:
                    return None
                # the package's own fixes now wrap the search: call it through the class
                return cls.search_modules(name)
            return original(cls, name)

        return search_modules

    patch(module, "Registrable.search_modules", "catwalk:: types import catwalk_steps", wrap)
