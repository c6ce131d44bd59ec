"""What catwalk_steps changes in Tango from the interpreter's first moment, before Tango reads an
experiment or imports `catwalk_steps`:

- :mod:`.log_records`: Tango's log receiver reads, and its senders write, JSON records (its own
  unpickle whatever reaches the port, from any local user), and it prints only the records
  that carry its key (its own workers'), their control characters escaped;
- :mod:`.one_line`: errors on the terminal in one line, also those raised while Tango evaluates
  the experiment, `--ext-var` and `-o`, before the package is imported (and no traceback for
  a log record a full disk cannot take);
- :mod:`.settings`: where Tango finds no `tango.yml`, ours (this package's): `tango run` works
  from any directory;
- :mod:`.registry_search`: a `catwalk::` type imports `catwalk_steps`, also under settings of
  one's own that do not include it, and a type nothing registered is one line naming the
  closest (the one wrap of Tango's search);
- :mod:`.jsonnet_library`: `import 'lib/pipeline.libsonnet'` finds the library the package
  ships, from an experiment file in any directory.

Imported by the fork server that workers fork from (the launcher's `PRELOAD`), not at
interpreter start: :mod:`.exit_with_parent` (it ends with the process that started it) and
:mod:`.fork_requests` (it refuses a malformed request and goes on serving).

`make setup` writes `catwalk_startup.pth` into the environment's site-packages (`python -m
catwalk_startup` does it for any environment): every interpreter of the environment installs an
import hook that patches Tango's logging, settings, registry and params modules as they are
imported.
Every patch, here and in `catwalk_steps`, is one named, version-checked :func:`.patching.patch`.
Nothing here imports Tango, torch or `catwalk_steps`: an interpreter that never imports Tango
only gains the hook.
`catwalk_steps` installs the same when it is imported (where there is no .pth, that leaves the
moment between Tango starting its receiver and the package's import).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import types
from pathlib import Path
from typing import Any

TANGO_LOGGING = "tango.common.logging"
TANGO_REGISTRABLE = "tango.common.registrable"
TANGO_SETTINGS = "tango.settings"
TANGO_PARAMS = "tango.common.params"
PTH_NAME = "catwalk_startup.pth"


def patch_logging(module: types.ModuleType) -> None:
    """Its changes, on Tango's logging module; refused, in one line, on a Tango they were not
    checked against (its receiver would unpickle what reaches it: never left so silently)."""
    from .log_records import PATCH, patch_tango_logging, senders_write_json
    from .one_line import drop_unwritable_records, one_line_on_the_terminal
    from .patching import patch

    patch_tango_logging(module)
    drop_unwritable_records(module)

    def wrap(original: Any) -> Any:
        def _initialize_logging(*args: Any, **kwargs: Any) -> Any:
            """Tango's (private in 1.3.2: the one place that makes its handlers), then: its
            socket senders write JSON, its terminal handlers show errors in one line."""
            result = original(*args, **kwargs)
            senders_write_json(module)
            one_line_on_the_terminal(logging.getLogger())
            return result

        return _initialize_logging

    patch(module, "_initialize_logging", PATCH, wrap)


def patch_registrable(module: types.ModuleType) -> None:
    from .registry_search import patch_registrable

    patch_registrable(module)


def patch_settings(module: types.ModuleType) -> None:
    from .settings import patch_settings

    patch_settings(module)


def patch_params(module: types.ModuleType) -> None:
    from .jsonnet_library import patch_params

    patch_params(module)


PATCHES = {
    TANGO_LOGGING: patch_logging,
    TANGO_REGISTRABLE: patch_registrable,
    TANGO_SETTINGS: patch_settings,
    TANGO_PARAMS: patch_params,
}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds Tango's modules of :data:`PATCHES` as the path finder does, and patches each once
    executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            PATCHES[fullname](module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Patches Tango's modules now where imported, else as soon as they are."""
    for name, patch_module in PATCHES.items():
        if name in sys.modules:
            patch_module(sys.modules[name])
    if not all(name in sys.modules for name in PATCHES) and not any(
        isinstance(finder, _PatchAfterImport) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _PatchAfterImport())


def write_pth() -> Path:
    """`catwalk_startup.pth` in this environment's site-packages."""
    import sysconfig

    path = Path(sysconfig.get_paths()["purelib"]) / PTH_NAME
    path.write_text("import catwalk_startup; catwalk_startup.install()\n")
    return path
