"""A warm slot of `tango run --parallelism N`: one process that builds the step graph once,
then runs the steps its parent sends it, one at a time, until the parent closes the pipe.

Tango's multicore executor started a fresh `tango` process per step, which imported torch,
transformers and Tango and built the whole graph again each time (seconds of CPU per step), and
loaded its model again. A slot pays the graph once, and keeps the last model it loaded or trained
(:mod:`catwalk_steps.workspace.held_model`), which the parent uses to send a model's evaluations to
the slot that holds it (:mod:`.scheduler`). Slots fork from the server training workers fork
from (:func:`catwalk_steps.launch.launcher.start_worker_server`), which has imported torch,
transformers, Tango and this package once: a slot started as a fresh interpreter spent about
8 s of CPU on those imports, each slot of each run.

Parent and slot talk over two one-way pipes in JSON messages (`send_bytes`, never `send`: plain
data, never a pickle):
    parent -> slot: {"run": step name}
    slot -> parent: {"ready": true} once the graph is built; {"finished": step name, "ok": bool,
                    "model": the key of the model the slot now holds, or null}
A step's logs go to `tango run`'s log server under the step's name, as a Tango child's do. The
slot's process name (`/proc/<pid>/comm`, what `ps -o comm` and `top` show) is `slot-<parent>`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from ..launch.worker_process import SLOT_ENV, die_with

MESSAGE_LIMIT = 1 << 16  # bytes: a message is a step's name and a model's key
# The run's `--parallelism`, in a slot's environment: Tango gives a step no handle on the
# executor that runs it, so a step that makes steps (:mod:`.nested`) reads it there.
PARALLELISM_ENV = "CATWALK_PARALLELISM"


@dataclass(frozen=True)
class SlotSettings:
    """What a slot is started with (the fork server receives it with the call)."""

    graph: str  # the step graph's file, written with its unique ids
    workspace: str  # its URL
    parent: int  # `tango run`'s pid
    threads: int  # OMP_NUM_THREADS, torch's threads
    parallelism: int  # the run's `--parallelism` (the steps that make steps spread them as wide)
    env: dict[str, str] = field(default_factory=dict)  # the parent's environment
    include_package: tuple[str, ...] = ()


def send(channel: Any, message: dict[str, Any]) -> bool:
    """False when the other end has closed its pipe (`tango run` stopped, or gone)."""
    try:
        channel.send_bytes(json.dumps(message).encode())
    except OSError:  # BrokenPipeError, or the pipe closed on this side
        return False
    return True


def receive(channel: Any) -> dict[str, Any] | None:
    """The next message on `channel`: None when it is closed, or says something not ours."""
    try:
        message = json.loads(channel.recv_bytes(MESSAGE_LIMIT))
    except (EOFError, OSError, ValueError):
        return None
    return message if isinstance(message, dict) else None


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


def serve(settings: SlotSettings, inbox: Any, outbox: Any) -> None:
    from tango import Workspace
    from tango.common.util import import_extra_module
    from tango.executor import Executor
    from tango.step_graph import StepGraph

    from ..workspace.step_cache import held_by

    for package in settings.include_package:
        import_extra_module(package)
    workspace = Workspace.from_url(settings.workspace)
    graph = StepGraph.from_file(settings.graph)
    executor = Executor(workspace=workspace, include_package=list(settings.include_package))
    if not send(outbox, {"ready": True}):
        return
    while (request := receive(inbox)) is not None:
        name = request.get("run")
        if not isinstance(name, str) or name not in graph:
            return
        log_under(f"step {name}")
        ok = run_step(graph[name], executor)
        if not send(outbox, {"finished": name, "ok": ok, "model": held_by(workspace).key}):
            return  # stopped while the step ended: its state is in the workspace


def become_slot(settings: SlotSettings) -> None:
    """The parent's environment and the slot's threads, name and signals: a forked slot starts
    where a fresh `python` started with that environment would, and the run's parallelism."""
    os.environ.clear()
    os.environ.update(settings.env)
    os.environ["OMP_NUM_THREADS"] = str(settings.threads)
    os.environ[SLOT_ENV] = "1"
    os.environ[PARALLELISM_ENV] = str(settings.parallelism)
    import torch

    torch.set_num_threads(settings.threads)
    with contextlib.suppress(OSError, AttributeError):
        name = f"slot-{settings.parent}".encode()[:15]
        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME


def run_parallelism() -> int:
    """The `--parallelism` of the run this process is a slot of; 1 outside a slot (the steps
    run here, one after another)."""
    try:
        return int(os.environ.get(PARALLELISM_ENV, "1"))
    except ValueError:
        return 1


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


def run_slot(settings: SlotSettings, inbox: Any, outbox: Any) -> None:
    """A slot's life, in the process the fork server made for it (`multiprocessing`'s target):
    it ends as a fresh interpreter would (its exit functions run: multiprocessing leaves a
    forked child without them), with 130 after Ctrl-C or SIGTERM."""
    become_slot(settings)
    interrupt = InterruptOnce()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupt)
    # SIGTERM (handled as Ctrl-C) once `tango run` is gone, even killed outright: a forked
    # slot's parent is the fork server, so Linux's parent-death signal would name the wrong one
    die_with(settings.parent, signal.SIGTERM)
    log_under("slot")
    code = 0
    try:
        serve(settings, inbox, outbox)
    except KeyboardInterrupt:
        code = 130
    finally:
        interrupt.taken = True  # the exit is not interrupted
        atexit._run_exitfuncs()
    sys.exit(code)
