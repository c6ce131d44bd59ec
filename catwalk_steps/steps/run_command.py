"""`tango run` as users expect it, where Tango 1.3.2 falls short; each fix one named patch:

- the reports of the run are printed at its end, cached or not, also with `--parallelism`;
- SIGTERM acts as Ctrl-C does (the running step is marked failed and its lock released);
- `--parallelism` finds `tango` without an activated venv;
- errors whose message says it all are one line on the terminal, tracebacks in the run's log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from .patching import patch

TRACEBACK_LOGGER = "catwalk_steps.traceback"


def print_reports_after_every_run() -> None:
    """Tango calls a step's `ensure_result` in whichever process runs it: with the multicore
    executor that is a child process, and a cached report is not touched at all, so a table
    printed there would appear only sometimes. `tango.__main__.execute_step_graph` (a module
    global looked up when `tango run` calls it) is wrapped to print the reports of the step
    graph from the workspace once the run is over, in the main process only."""
    import tango.__main__ as tango_main

    def wrap(original):
        def execute_step_graph(step_graph, workspace=None, *args, **kwargs):
            called_by_executor = kwargs.get("called_by_executor", False)
            if not called_by_executor:
                install_sigterm_as_interrupt()
            try:
                return original(step_graph, workspace, *args, **kwargs)
            finally:
                if not called_by_executor and workspace is not None:
                    print_reports(step_graph, workspace)

        return execute_step_graph

    patch(tango_main, "execute_step_graph", "print_reports_after_every_run", wrap)


def print_reports(step_graph, workspace) -> None:
    from ..reports import print_report
    from .report import MetricsReport, SuiteReport

    for step in step_graph.values():
        if isinstance(step, (MetricsReport, SuiteReport)) and step in workspace.step_cache:
            location = workspace.step_info(step).result_location
            print_report(workspace.step_cache[step], location)


def install_sigterm_as_interrupt() -> None:
    """SIGTERM to `tango run` acts as Ctrl-C does: the running step is marked failed and its
    lock released before the process exits (Tango installs no handler, so SIGTERM killed the
    process on the spot and left the step 'running'). Main thread only."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def tango_on_path() -> None:
    """`--parallelism N` starts each step as a child `tango` process found on PATH
    (`multicore_executor.py`); a venv's `tango` run without activating the venv is not there.
    The directory of this interpreter goes first on PATH. (No patch: an environment change.)"""
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + path


class _HideTracebacks(logging.Filter):
    """A filter for the terminal's handlers: the traceback records are for the log file."""

    def filter(self, record) -> bool:
        return record.name != TRACEBACK_LOGGER


def hide_tracebacks_on_the_terminal(root: logging.Logger) -> None:
    """Every root handler but the run's log file (a `logging.FileHandler`, Tango's
    `file_handler`) skips the traceback records; once per handler. Done when an error is logged,
    not when this package is imported: imported before Tango sets up its handlers (an API user,
    a process forked from one that imported it), there were none to filter."""
    for handler in root.handlers:
        terminal = not isinstance(handler, logging.FileHandler)
        if terminal and not any(isinstance(f, _HideTracebacks) for f in handler.filters):
            handler.addFilter(_HideTracebacks())


def one_line_errors() -> None:
    """Tango logs every failure with its traceback (`tango.common.logging.log_exc_info`, used by
    its `sys.excepthook` and by the executor): a wall of 30-110 lines with the cause at the end.
    For the registered error types (:mod:`catwalk_steps.errors`: configuration, task data,
    non-finite loss, checkpoints, workers), the terminal shows `Type: message` of the innermost
    one in the chain, and the traceback goes to the logger `catwalk_steps.traceback`, which the
    terminal's handlers skip and the run's log file (`<workspace>/runs/<run>/out.log`) keeps.
    `--log-level debug` (or CATWALK_TRACEBACKS=1) shows tracebacks on the terminal as before."""
    import tango.common.logging as tango_logging

    from ..errors import one_line

    def wrap(original):
        def log_exc_info(exctype, value, traceback, logger=None):
            root = logging.getLogger()
            verbose = root.level <= logging.DEBUG or os.environ.get("CATWALK_TRACEBACKS") == "1"
            line = one_line(value) if isinstance(value, BaseException) else None
            if verbose or line is None or value in tango_logging._EXCEPTIONS_LOGGED:
                return original(exctype, value, traceback, logger=logger)
            tango_logging._EXCEPTIONS_LOGGED.append(value)
            hide_tracebacks_on_the_terminal(root)
            logging.getLogger(TRACEBACK_LOGGER).error(
                "Traceback of the error below", exc_info=(exctype, value, traceback)
            )
            (logger or root).error(line)

        return log_exc_info

    patch(tango_logging, "log_exc_info", "one_line_errors", wrap)


print_reports_after_every_run()
tango_on_path()
one_line_errors()
