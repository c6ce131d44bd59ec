"""An experiment file read as `tango run` reads it, for the commands that build its step graph
without running it (`catwalk-plan`, `catwalk-worker`): node 0's graph and theirs must be one.

`tango run` (ai2-tango 1.3.2, `tango/__main__.py` `_run`) finds its settings (`tango.yml` in the
working directory, else `~/.config/tango.yml`, else ours: :mod:`catwalk_startup.settings`),
puts the settings' `environment` into the process's environment, evaluates the file with the
environment, `--ext-var` and `-o` (:class:`tango.common.params.Params`), imports `-i`, the file's
own `include_package` and the settings', builds the graph and refuses any other top-level key.
Here in the same order, with the same errors (each one line: :func:`..errors.command_line`).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tango.common.exceptions import ConfigurationError


@dataclass(frozen=True)
class Experiment:
    """An experiment as `tango run` builds it: nothing computed, no step run.

    :ivar config: the file evaluated with its ext vars and overrides (JSON data).
    :ivar settings: Tango's settings it was read under (`tango.yml`).
    :ivar steps: its step graph (Tango's `StepGraph`).
    """

    path: Path
    config: dict[str, Any]
    settings: Any
    steps: Any


def add_reading_arguments(parser: argparse.ArgumentParser, ext_var: str) -> None:
    """`-D/--ext-var` and `-i/--include-package`, as `tango run` takes them (`ext_var`: what an
    ext var's help says it is)."""
    parser.add_argument(
        "-D",
        "--ext-var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"{ext_var}; repeat for more (default: those tango.yml declares)",
    )
    parser.add_argument(
        "-i",
        "--include-package",
        action="append",
        default=[],
        metavar="PACKAGE",
        help="a module to import first, as tango run's -i; repeat for more (default: tango.yml's)",
    )


def ext_vars(given: Sequence[str], settings: Any) -> dict[str, str]:
    """The ext vars `tango run` evaluates the file with, besides the environment: the settings'
    `environment` (Tango sets it in the environment, over what was there), then each
    `--ext-var KEY=VALUE`; one line for one without exactly one `=`, as Tango refuses it."""
    found = dict(settings.environment or {})
    for var in given:
        key, equals, value = var.partition("=")
        if not equals or "=" in value:
            raise ConfigurationError(f"Invalid --ext-var '{var}' (KEY=VALUE)")
        found[key] = value
    return found


def read_experiment(
    path: Path,
    overrides: str | None = None,
    given_ext_vars: Sequence[str] = (),
    include_package: Sequence[str] = (),
) -> Experiment:
    """The experiment at `path` as `tango run` would build it from this directory."""
    from tango.common.params import Params
    from tango.common.util import import_extra_module
    from tango.settings import TangoGlobalSettings
    from tango.step_graph import StepGraph

    if not Path(path).is_file():
        raise ConfigurationError(f"{path}: no such experiment file")
    path = Path(path).resolve()  # as Tango's command line resolves it
    settings = TangoGlobalSettings.default()
    variables = ext_vars(given_ext_vars, settings)
    params = Params.from_file(path, params_overrides=overrides or "", ext_vars=variables)
    config = copy.deepcopy(params.as_dict(quiet=True))
    packages = [*include_package, *params.pop("include_package", [])]
    for package in [*packages, *(settings.include_package or [])]:
        import_extra_module(package)
    steps = StepGraph.from_params(params.pop("steps"))
    params.assert_empty("'tango run'")
    return Experiment(path, config, settings, steps)
