"""`tango run --parallelism N`: the step graph run by N warm slots (:mod:`.slot`).

What Tango 1.3.2's multicore executor did, measured on `sweep_demo` (4 cells, 2 cores): a fresh
`tango` process per step, each importing torch, transformers and Tango and building the graph
again, and its model loaded again; between them the parent re-read every step's state from the
workspace in a loop without pause, a core's worth of CPU taken from the cells. The sweep took
4x as long as without `--parallelism`.

Here the parent starts at most N slots once, sends each a step whose dependencies are done,
and sleeps until a slot reports. A ready evaluation goes to the slot that holds its model (the
slot that trained it, or scored it last), so a model is loaded once. On CPU the cores are split
between the slots (threads per slot, :func:`.sizing.slot_threads`); GPUs are leased by the steps
themselves (:mod:`catwalk_steps.distributed.lease`). A slot that dies fails its step; another
slot is started for the steps left.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
from tempfile import NamedTemporaryFile
from typing import Any, cast

from tango import Step
from tango.executor import ExecutionMetadata, ExecutorOutput
from tango.step_graph import StepGraph
from tango.step_info import StepState

from ..distributed.devices import usable_cores
from ..launch.launcher import server_context
from ..run_temp import run_temp_dir
from .sizing import crowding_line, slot_threads
from .slot import SlotSettings, receive, run_slot, send

logger = logging.getLogger(__name__)
STOP_GRACE_S = 10.0


class Slot:
    """A slot process, forked from the worker server, and the two pipes to it."""

    def __init__(self, context: Any, settings: SlotSettings):
        self.inbox, to_parent = context.Pipe(duplex=False)
        from_parent, self.outbox = context.Pipe(duplex=False)
        self.process = context.Process(
            target=run_slot, args=(settings, from_parent, to_parent), name="slot"
        )
        self.process.start()
        from_parent.close()  # the slot's ends: a slot gone is an end of file here
        to_parent.close()
        self.ready = False
        self.step: str | None = None  # running now
        self.model: str | None = None  # the key of the model it holds

    def send(self, step: str) -> None:
        self.step = step
        send(self.outbox, {"run": step})

    def receive(self) -> dict[str, Any] | None:
        """The slot's next message; None when it has gone (or said something not ours)."""
        return receive(self.inbox)

    def stop(self) -> None:
        """Closes its pipe (it exits when idle); SIGTERM if it is running a step; waits."""
        self.ask_to_stop()
        self.wait_stopped()

    def ask_to_stop(self) -> None:
        for channel in (self.outbox, self.inbox):
            with contextlib.suppress(OSError):  # the slot died with a write pending
                channel.close()
        if self.step is not None and self.process.is_alive():
            self.process.terminate()

    def wait_stopped(self) -> None:
        self.process.join(STOP_GRACE_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def steps_to_run(graph: StepGraph, workspace: Any) -> tuple[list[Step], list[Step]]:
    """(the steps to run, in the graph's order; the steps found in the cache), as Tango decides
    them: a cacheable step not completed, and an uncacheable step that no other step consumes."""
    leaves = graph.uncacheable_leaf_steps()
    run, cached = [], []
    for step in graph.values():
        if not step.cache_results:
            if step in leaves:
                run.append(step)
        elif workspace.step_info(step).state == StepState.COMPLETED:
            cached.append(step)
        else:
            run.append(step)
    return run, cached


class ParallelRun:
    """One run of a step graph by at most `parallelism` slots; ready steps are taken in the
    graph's order (the executor's: each model's evaluations together)."""

    def __init__(self, executor: Any, graph: StepGraph, run_name: str | None):
        self.executor = executor
        self.workspace = executor.workspace
        self.graph = graph
        self.run_name = run_name
        self.pending, self.cached = steps_to_run(graph, self.workspace)
        self.successful: dict[str, ExecutionMetadata] = {}
        self.failed: dict[str, ExecutionMetadata] = {}
        self.not_run: dict[str, ExecutionMetadata] = {}
        self.slots: list[Slot] = []

    def execute(self) -> ExecutorOutput:
        parallelism = int(self.executor.parallelism)
        parallelism = parallelism if parallelism > 0 else usable_cores()  # -1: a slot per core
        line = crowding_line(parallelism, self.pending)
        if line:
            logger.warning(line)
        directory = run_temp_dir()
        with NamedTemporaryFile(
            prefix="catwalk-graph-", suffix=".jsonnet", dir=directory
        ) as graph_file:
            self.graph.to_file(graph_file.name, include_unique_id=True)
            settings = self.slot_settings(graph_file.name, slot_threads(parallelism))
            context = server_context(self.executor.include_package or ())
            interrupted = False
            try:
                while self.pending or self.busy():
                    self.drop_unrunnable()
                    while len(self.slots) < min(parallelism, len(self.pending) + self.busy()):
                        self.slots.append(Slot(context, settings))
                    self.dispatch()
                    if self.busy() or self.pending:
                        self.wait()
            except KeyboardInterrupt:
                interrupted = True
                raise
            finally:
                running = [slot.step for slot in self.slots if slot.step is not None]
                for slot in self.slots:  # all at once: their grace runs side by side
                    slot.ask_to_stop()
                for slot in self.slots:
                    slot.wait_stopped()
                if interrupted:
                    logger.error(stopped_line(running, len(self.pending)))
        for step in self.cached:
            step.log_cache_hit()
            self.successful[step.name] = self.metadata(step)
        return ExecutorOutput(self.successful, self.failed, self.not_run)

    def slot_settings(self, graph_path: str, threads: int) -> SlotSettings:
        return SlotSettings(
            graph=graph_path,
            workspace=self.workspace.url,
            parent=os.getpid(),
            threads=threads,
            parallelism=int(self.executor.parallelism),
            env=dict(os.environ),
            include_package=tuple(self.executor.include_package or ()),
        )

    def busy(self) -> int:
        return sum(slot.step is not None for slot in self.slots)

    def done(self, step: Step) -> bool:
        return step.name in self.successful or step in self.cached or not step.cache_results

    def drop_unrunnable(self) -> None:
        """Steps after a failed one are not run (Tango's rule)."""
        stopped = set(self.failed) | set(self.not_run)
        for step in list(self.pending):
            if any(dep.name in stopped for dep in step.recursive_dependencies):
                self.pending.remove(step)
                self.not_run[step.name] = ExecutionMetadata()

    def ready(self) -> list[Step]:
        return [s for s in self.pending if all(map(self.done, s.recursive_dependencies))]

    def dispatch(self) -> None:
        """Each idle slot gets a ready step: first one of the model it holds."""
        for slot in self.slots:
            if not slot.ready or slot.step is not None:
                continue
            ready = self.ready()
            if not ready:
                return
            same_model = [s for s in ready if slot.model and model_key(s) == slot.model]
            step = (same_model or ready)[0]
            self.pending.remove(step)
            slot.send(step.name)

    def wait(self) -> None:
        """Until some slot says something (a slot that died: its step failed, slot replaced)."""
        readable, _, _ = select.select([slot.inbox for slot in self.slots], [], [])
        for slot in [s for s in self.slots if s.inbox in readable]:
            message = slot.receive()
            if message is None:
                self.lost(slot)
            elif message.get("ready") is True:
                slot.ready = True
            elif message.get("finished") == slot.step:
                self.finished(slot, bool(message.get("ok")), message.get("model"))
            else:
                self.lost(slot)

    def finished(self, slot: Slot, ok: bool, model: Any) -> None:
        step = self.graph[cast(str, slot.step)]  # the step it ran
        slot.step, slot.model = None, model if isinstance(model, str) else None
        if ok:
            self.successful[step.name] = self.metadata(step)
        else:
            self.failed[step.name] = ExecutionMetadata()

    def lost(self, slot: Slot) -> None:
        if slot.step is not None:
            logger.error("step %s: its slot process ended while running it", slot.step)
            self.failed[slot.step] = ExecutionMetadata()
            slot.step = None
        elif not slot.ready:  # the next would fail the same way: the run stops
            logger.error("a --parallelism slot ended before it was ready (its log says why)")
            self.failed.update((step.name, ExecutionMetadata()) for step in self.pending)
            self.pending.clear()
        slot.stop()
        self.slots.remove(slot)

    def metadata(self, step: Step) -> ExecutionMetadata:
        if not step.cache_results:
            return ExecutionMetadata()
        return ExecutionMetadata(result_location=self.workspace.step_info(step).result_location)


def stopped_line(running: list[str], not_started: int) -> str:
    """What a Ctrl-C (or SIGTERM) of `tango run --parallelism N` stopped, in one line (each
    stopped step's own line, from its slot, says how its rerun goes on)."""
    stopped = ", ".join(running) if running else "no step was running"
    return f"interrupted: stopped {stopped}; {not_started} more not started"


def model_key(step: Step) -> str | None:
    key = getattr(step, "model_key", None)
    return key() if callable(key) else None
