"""A warm slot of `tango run --parallelism N`: one process that imports the packages and builds
the step graph once, then runs the steps its parent sends it, one at a time, until the parent
closes the pipe.

Tango's multicore executor started a fresh `tango` process per step, which imported torch,
transformers and Tango and built the whole graph again each time (seconds of CPU per step), and
loaded its model again. A slot pays that once, and keeps the last model it loaded or trained
(:mod:`catwalk_steps.standalone.loaded`), which the parent uses to send a model's evaluations to
the slot that holds it (:mod:`.scheduler`).

Parent and slot talk over two pipes the parent made, in JSON lines: plain data, never a pickle.
    parent -> slot: {"run": step name}
    slot -> parent: {"ready": true} once the graph is built; {"finished": step name, "ok": bool,
                    "model": the key of the model the slot now holds, or null}
A step's logs go to `tango run`'s log server under the step's name, as a Tango child's do.

    python -m catwalk_steps.parallel.slot --graph FILE --workspace URL --read-fd N --write-fd M
        --parent PID [--run-name NAME] [--include-package PKG ...]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import sys
from typing import Any, TextIO

from ..launch.worker_process import SLOT_ENV


def send(channel: TextIO, message: dict[str, Any]) -> None:
    channel.write(json.dumps(message) + "\n")  # one line, well under PIPE_BUF: one write
    channel.flush()


def log_under(prefix: str) -> None:
    """This process's log records to `tango run`'s log server, prefixed (a Tango child's way)."""
    import logging

    from tango.common.logging import initialize_prefix_logging

    for handler in logging.getLogger().handlers:
        handler.close()  # the previous step's socket
    initialize_prefix_logging(prefix=prefix, main_process=False)


def run_step(step: Any, executor: Any) -> bool:
    """The step computed into the workspace (its dependencies are there already); False if it
    failed, the failure logged as Tango's executor logs it."""
    from tango.common.logging import log_exception

    try:
        executor.execute_step(step)
    except Exception as error:  # the step failed; the slot goes on with the next
        log_exception(error)
        return False
    return True


def serve(args: argparse.Namespace) -> None:
    from tango import Workspace
    from tango.common.util import import_extra_module
    from tango.executor import Executor
    from tango.step_graph import StepGraph

    from ..standalone.loaded import held_model_key

    inbox = os.fdopen(args.read_fd, "r")
    outbox = os.fdopen(args.write_fd, "w")
    for package in args.include_package:
        import_extra_module(package)
    workspace = Workspace.from_url(args.workspace)
    graph = StepGraph.from_file(args.graph)
    executor = Executor(workspace=workspace, include_package=args.include_package)
    send(outbox, {"ready": True})
    for line in inbox:
        name = json.loads(line)["run"]
        log_under(f"step {name}")
        ok = run_step(graph[name], executor)
        send(outbox, {"finished": name, "ok": ok, "model": held_model_key()})


def stop_with_parent(parent: int) -> None:
    """SIGTERM (handled as Ctrl-C) once `tango run` is gone, even killed outright: Linux's
    parent-death signal; elsewhere the closed pipe ends the slot after its step."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # gone before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


class InterruptOnce:
    """The slot's Ctrl-C and SIGTERM handler: KeyboardInterrupt once (the running step stops,
    marked failed, its lock released), then nothing. A slot is sent both when Ctrl-C reaches
    the terminal's process group and `tango run` then stops its slots; a second
    KeyboardInterrupt raised in the first one's cleanup, or in the interpreter's exit, printed
    an "Exception ignored in atexit callback" wall. (Not SIG_IGN: a signal already pending when
    the handler changes is then raised as "OSError: Signal 15 ignored due to race condition".)
    The parent kills a slot that does not end within its grace."""

    def __init__(self) -> None:
        self.taken = False

    def __call__(self, signum: int, frame: Any) -> None:
        if not self.taken:
            self.taken = True
            raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--read-fd", type=int, required=True)
    parser.add_argument("--write-fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--run-name", default=None)
    parser.add_argument("--include-package", action="append", default=[])
    args = parser.parse_args(argv)
    os.environ[SLOT_ENV] = "1"
    interrupt = InterruptOnce()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupt)
    stop_with_parent(args.parent)
    log_under("slot")
    try:
        serve(args)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        interrupt.taken = True  # the interpreter's exit is not interrupted


if __name__ == "__main__":
    main()
