"""Our settings where Tango finds none.

`tango run` reads `tango.yml` from the working directory (else `~/.config/tango.yml`); the
repository's names our package, executor, workspace and the ext vars the experiments declare.
From any other directory Tango fell back to nothing: the experiment's `catwalk::` types were
searched for through every module Tango knows (a 55-line `ImportError` under transformers 5),
its sweep ext vars were undefined, and its default workspace, kept in memory, is one our steps
cannot use. Where Tango finds no settings file, the settings are the package's own
(`catwalk_startup/tango.yml`, the file the repository's `tango.yml` links to): a run from any
directory is the run from the repository, its workspace `./workspace` unless `-w` says otherwise.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from .patching import patch

DEFAULTS = Path(__file__).with_name("tango.yml")


def patch_settings(module: types.ModuleType) -> None:
    """Wraps `module.TangoGlobalSettings.default` (tango.settings, ai2-tango 1.3.2)."""

    def wrap(original: Any) -> Any:
        def default(cls: Any) -> Any:
            """Tango's search (./tango.yml, ~/.config/tango.yml), else ours."""
            found = original(cls)
            return found if found.path is not None else cls.from_file(DEFAULTS)

        return default

    patch(module, "TangoGlobalSettings.default", "our settings where Tango finds none", wrap)
