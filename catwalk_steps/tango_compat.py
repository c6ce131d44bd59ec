"""Fixes for Tango 1.3.2 behaviour that breaks ordinary use; each is one small, named patch:
run metadata that fails to record, reports printed only sometimes, SIGTERM that leaves a step
"running", `--parallelism` that needs an activated venv, and an unknown `type` that ends in an
ImportError. (A workspace that several runs share is a class of its own:
:class:`catwalk_steps.workspace.SharedLocalWorkspace`.)

Checked against ai2-tango 1.3.2. Importing `catwalk_steps` applies them.
"""

from __future__ import annotations

import contextlib
import functools
from importlib import metadata

from tango.common.exceptions import ConfigurationError
from tango.step_info import EnvironmentMetadata, GitMetadata


def git_metadata_or_none() -> GitMetadata | None:
    """Tango's git metadata, or None where Tango's own look-up raises."""
    try:
        return GitMetadata.check_for_repo()
    except ValueError:  # no commit yet, or no remote named 'origin'
        return None


def installed_packages() -> list[tuple[str, str]]:
    """(name, version) of every installed distribution, read with importlib.metadata."""
    found = {
        (d.metadata["Name"], d.version) for d in metadata.distributions() if d.metadata["Name"]
    }
    return sorted(found)


def record_environment_without_failures() -> None:
    """Two default factories of `EnvironmentMetadata` fail in ordinary set-ups:

    - `git`: inside a git repository with no commit yet or no remote, `tango run` stops with
      `ValueError: Reference at 'refs/heads/main' does not exist`. We record no git metadata
      there, as Tango does outside a repository.
    - `packages`: Tango reads them with `pkg_resources`, which current setuptools no longer
      ships, and logs an error with a traceback for every step. We read them with
      importlib.metadata.

    The factories were bound when the dataclass was defined, so we pass both fields explicitly.
    """
    original_init = EnvironmentMetadata.__init__
    if getattr(original_init, "_catwalk_tolerant", False):
        return

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        if not args:
            kwargs.setdefault("git", git_metadata_or_none())
            kwargs.setdefault("packages", installed_packages())
        original_init(self, *args, **kwargs)

    __init__._catwalk_tolerant = True
    EnvironmentMetadata.__init__ = __init__


record_environment_without_failures()


# --- `tango run` itself --------------------------------------------------------------------------


def print_reports_after_every_run() -> None:
    """Print every report of the run at its end, cached or not, also with `--parallelism`.

    Tango calls a step's `ensure_result` in whichever process runs it: with the multicore
    executor that is a child process, and a cached report is not touched at all, so a table
    printed there would appear only sometimes. This wraps `tango.__main__.execute_step_graph`
    (a module global looked up when `tango run` calls it; ai2-tango 1.3.2) and prints the
    reports of the step graph from the workspace once the run is over, in the main process only.
    """
    import tango.__main__ as tango_main

    original = tango_main.execute_step_graph
    if getattr(original, "_catwalk_prints_reports", False):
        return

    @functools.wraps(original)
    def execute_step_graph(step_graph, workspace=None, *args, **kwargs):
        called_by_executor = kwargs.get("called_by_executor", False)
        if not called_by_executor:
            install_sigterm_as_interrupt()
        try:
            return original(step_graph, workspace, *args, **kwargs)
        finally:
            if not called_by_executor and workspace is not None:
                print_reports(step_graph, workspace)

    execute_step_graph._catwalk_prints_reports = True  # type: ignore[attr-defined]
    tango_main.execute_step_graph = execute_step_graph


def print_reports(step_graph, workspace) -> None:
    from .report import print_report
    from .steps import MetricsReport

    for step in step_graph.values():
        if isinstance(step, MetricsReport) and step in workspace.step_cache:
            location = workspace.step_info(step).result_location
            print_report(workspace.step_cache[step], location)


def install_sigterm_as_interrupt() -> None:
    """SIGTERM to `tango run` acts as Ctrl-C does: the running step is marked failed and its
    lock released before the process exits (Tango installs no handler, so SIGTERM killed the
    process on the spot and left the step 'running'). Main thread only."""
    import signal

    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def tango_on_path() -> None:
    """`--parallelism N` starts each step as a child `tango` process found on PATH; a venv's
    `tango` run without activating the venv is not there (ai2-tango 1.3.2
    `multicore_executor.py`). The directory of this interpreter goes first on PATH."""
    import os
    import sys
    from pathlib import Path

    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + path


# --- Unknown type names ---------------------------------------------------------------------------


class UnknownTypeError(ConfigurationError):
    """A `type` in the config that nothing registered; the message suggests the closest."""


def unknown_types_say_so() -> None:
    """ "type": "catwalk::trian" says it is unknown, suggests the closest registered names, and
    lists the names of that kind.

    Tango's `Registrable.search_modules` imports every integration while it looks for an unknown
    name, and one of them (transformers) fails to import under current transformers, so the
    user saw `ImportError: cannot import name 'modeling_flax_auto'`. The wrapper skips the
    search for our own `catwalk::` prefix, ignores integrations that fail to import, and raises
    :class:`UnknownTypeError` when the name is still unknown (ai2-tango 1.3.2).
    """
    from tango.common.registrable import Registrable

    original = Registrable.__dict__["search_modules"].__func__
    if getattr(original, "_catwalk_says_unknown", False):
        return

    def search_modules(cls, name: str):
        registry = Registrable._registry[cls]
        if name in registry or not isinstance(name, str) or name == "ref" or "::" not in name:
            return original(cls, name)
        if not name.startswith("catwalk::"):
            with contextlib.suppress(ImportError):
                original(cls, name)
            if name in registry:
                return None
        raise UnknownTypeError(unknown_type_message(cls, name, sorted(registry)))

    search_modules._catwalk_says_unknown = True  # type: ignore[attr-defined]
    Registrable.search_modules = classmethod(search_modules)  # type: ignore[assignment]


def unknown_type_message(cls: type, name: str, registered: list[str]) -> str:
    import difflib
    import re

    kind = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()
    # Case-insensitively: 'torch::Adamw' is 'torch::AdamW', not 'torch::Adam'.
    lowered = {r.lower(): r for r in registered}
    close = [lowered[c] for c in difflib.get_close_matches(name.lower(), lowered, n=1, cutoff=0.6)]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} type '{name}'{hint} (registered: {', '.join(registered)})"


# --- One line per error ----------------------------------------------------------------------


TRACEBACK_LOGGER = "catwalk_steps.traceback"


class _HideTracebacks:
    """A filter for the terminal's handlers: the traceback records are for the log file."""

    def filter(self, record) -> bool:
        return record.name != TRACEBACK_LOGGER


def one_line_errors() -> None:
    """Errors whose message says it all are shown as one line on the terminal.

    Tango logs every failure with its traceback (`tango.common.logging.log_exc_info`, used by
    its `sys.excepthook` and by the executor): a wall of 30-110 lines with the cause at the
    end. This wraps `log_exc_info` (ai2-tango 1.3.2): for the registered error types
    (:mod:`catwalk_steps.errors`: configuration, task data, non-finite loss, checkpoints,
    workers), the terminal shows `Type: message` of the innermost one in the chain, and the
    traceback goes to the logger `catwalk_steps.traceback`, which the terminal's handlers skip
    and the run's log file (`<workspace>/runs/<run>/out.log`) keeps. `--log-level debug` (or
    CATWALK_TRACEBACKS=1) shows tracebacks on the terminal as before.
    """
    import logging
    import os

    import tango.common.logging as tango_logging

    from .errors import one_line

    original = tango_logging.log_exc_info
    if getattr(original, "_catwalk_one_line", False):
        return
    root = logging.getLogger()
    verbose = root.level <= logging.DEBUG or os.environ.get("CATWALK_TRACEBACKS") == "1"
    if not verbose:
        for handler in root.handlers:  # the terminal's; a run's file handler comes later
            handler.addFilter(_HideTracebacks())

    @functools.wraps(original)
    def log_exc_info(exctype, value, traceback, logger=None):
        line = one_line(value) if isinstance(value, BaseException) else None
        if verbose or line is None or value in tango_logging._EXCEPTIONS_LOGGED:
            return original(exctype, value, traceback, logger=logger)
        tango_logging._EXCEPTIONS_LOGGED.append(value)
        logging.getLogger(TRACEBACK_LOGGER).error(
            "Traceback of the error below", exc_info=(exctype, value, traceback)
        )
        (logger or root).error(line)

    log_exc_info._catwalk_one_line = True  # type: ignore[attr-defined]
    tango_logging.log_exc_info = log_exc_info


print_reports_after_every_run()
tango_on_path()
unknown_types_say_so()
one_line_errors()
