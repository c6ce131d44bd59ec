"""The experiment library found from any experiment file, run from any directory.

The shipped experiments start with `local lib = import 'lib/pipeline.libsonnet';`. The library
ships with the package (`catwalk_steps/jsonnet/lib/`), and Tango 1.3.2 evaluates an experiment
with its own directory as jsonnet's only library path (`Params.from_file`:
`evaluate_file(name, str(parent))`): an experiment copied anywhere else failed with a 30-line
traceback ending `RuntimeError: can't resolve lib/pipeline.libsonnet`.

In every interpreter of the environment, `tango.common.params` evaluates files with the package's
library directory after the experiment's own: a `lib/` beside an experiment still comes first
(one's own copy of the library), and imports inside the library resolve beside their file, as
jsonnet resolves any import. The directory is found without importing the package (this runs
before Tango reads the experiment).

The library reads ext vars (`std.extVar('limit')`, the sweep grids) that the package's settings
declare empty (`catwalk_startup/tango.yml`, `environment:`). A `tango.yml` of one's own that
names only a workspace declares none of them, and jsonnet failed on the first
(`external variable is not defined: limit`): each gets its empty default from the package's
settings where neither the command line nor the environment gives it.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # (PyYAML, with Tango: no stubs installed)

from .patching import patch
from .settings import DEFAULTS

LIBRARY_PARENT = "jsonnet"  # catwalk_steps/jsonnet/lib/*.libsonnet: `import 'lib/...'`


def library_path() -> str | None:
    """The directory that holds `lib/`, inside the installed package (None without it)."""
    spec = importlib.util.find_spec("catwalk_steps")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / LIBRARY_PARENT
    return str(path) if path.is_dir() else None


def declared_ext_vars() -> dict[str, str]:
    """The ext vars the package's settings declare, with their defaults (all empty)."""
    settings = yaml.safe_load(DEFAULTS.read_text())
    return {str(key): str(value) for key, value in (settings.get("environment") or {}).items()}


def with_declared(ext_vars: Any) -> dict[str, Any]:
    """`ext_vars` as given, with every declared ext var they lack at its default."""
    return {**declared_ext_vars(), **(ext_vars or {})}


def with_library(jpathdir: Any) -> list[str]:
    """jsonnet's library paths: those given, then the package's library."""
    paths = [] if jpathdir is None else [jpathdir] if isinstance(jpathdir, str) else list(jpathdir)
    library = library_path()
    return paths + ([library] if library and library not in paths else [])


def patch_params(module: types.ModuleType) -> None:
    """`tango.common.params.evaluate_file` (the name `Params.from_file` calls) with the library
    path and the declared ext vars added; once."""

    def wrap(original: Any) -> Any:
        def evaluate_file(filename: str, jpathdir: Any = None, **kwargs: Any) -> str:
            kwargs["ext_vars"] = with_declared(kwargs.get("ext_vars"))
            return original(filename, with_library(jpathdir), **kwargs)

        return evaluate_file

    patch(module, "evaluate_file", "the experiment library found from any directory", wrap)
