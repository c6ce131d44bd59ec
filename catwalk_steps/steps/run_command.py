"""`tango run` as users expect it, where Tango 1.3.2 falls short; each fix one named patch:

- the reports of the run are printed at its end, cached or not, also with `--parallelism`;
- SIGTERM acts as Ctrl-C does (the running step is marked failed and its lock released);
- `--parallelism` finds `tango` without an activated venv.

(Errors in one line on the terminal: :mod:`catwalk_startup.one_line`.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from .patching import patch


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


print_reports_after_every_run()
tango_on_path()
