"""`catwalk::executor`, named in tango.yml: Tango's executors, and what `tango run` should do
around them (Tango 1.3.2 has no other seam for it).

- The evaluations of one model run one after another (:func:`execution_order`), so that the
  process's one loaded model (:mod:`catwalk_steps.workspace.held_model`) serves them all: a suite
  loads each model once. Without `--parallelism`, or with 0 (Tango documents 0 as every step
  in the main process) or 1, steps run in this process, as Tango's default executor runs them;
  with `--parallelism N` in N warm slot processes (:mod:`catwalk_steps.parallel`; -1: a slot
  per core), a model's evaluations in the slot that holds it. Below -1 is refused in one line.
- The run's reports are printed once it is over, cached or not, also with `--parallelism`, in
  this process: Tango calls a step's `ensure_result` in whichever process runs it, and does not
  touch a cached step at all, so a table printed by the step would appear only sometimes.
- The device lease directory is checked before any step runs (:func:`catwalk_steps.parallel.
  sizing.check_lease_directory`), where steps of the run will lease devices.
- SIGTERM acts as Ctrl-C does: the running step is marked failed and its lock released before
  the process exits (Tango installs no handler; SIGTERM killed the process on the spot and left
  the step "running").
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterable, Sequence
from typing import Any, cast

from tango import Step, Workspace
from tango.common.exceptions import ConfigurationError
from tango.executor import Executor
from tango.step_graph import StepGraph

from ..parallel.scheduler import ParallelRun
from ..parallel.sizing import check_lease_directory
from ..reports import ReportFormat, print_report
from ..run_temp import remove_stale
from ..workspace.step_cache import held_by


@Executor.register("catwalk::executor")
class CatwalkExecutor(Executor):
    """Runs a step graph as the module says."""

    def __init__(
        self,
        workspace: Workspace,
        include_package: Sequence[str] | None = None,
        parallelism: int | None = None,
    ) -> None:
        check_parallelism(parallelism)  # before the run is registered or any step runs
        super().__init__(workspace, include_package, parallelism)

    def execute_step_graph(self, step_graph: StepGraph, run_name: str | None = None) -> Any:
        install_sigterm_as_interrupt()
        remove_stale()  # what a run killed outright left in $TMPDIR (this user's)
        try:
            ordered = run_order(step_graph)
            check_lease_directory(
                [s for s in ordered.values() if s not in self.workspace.step_cache]
            )
            if self.parallelism not in (None, 0, 1):  # -1: a slot per core
                # Its slots are told the parallelism: steps that make steps when they run spread
                # them as widely (parallel.nested).
                return ParallelRun(self, ordered, run_name).execute()
            return super().execute_step_graph(ordered, run_name)
        finally:
            held_by(self.workspace).release()
            print_reports(step_graph, self.workspace)


def check_parallelism(parallelism: int | None) -> None:
    """`--parallelism` is a number of slots, 0 or 1 (every step in this process), or -1 (a slot
    per core); anything below -1 is one line (it ran a slot per core, as -1)."""
    if parallelism is not None and parallelism < -1:
        raise ConfigurationError(
            f"--parallelism: {parallelism} is not a number of steps side by side; give N >= 2 "
            "for N slots, 0 or 1 for every step in this process, or -1 for a slot per core"
        )


def run_order(step_graph: StepGraph) -> StepGraph:
    """The graph as the executor runs it, step after step (:func:`execution_order`); what
    `catwalk-plan` lists."""
    return StepGraph({s.name: s for s in execution_order(step_graph.values())})


def execution_order(steps: Iterable[Step]) -> list[Step]:
    """Tango's order (each step after its dependencies), with each model's evaluations next to
    each other: first the steps that need no evaluation (data, training), then the evaluations,
    grouped by model in the order the models first appear, then the steps that read evaluations
    (reports). An evaluation is a step that names its model (`model_key`)."""
    steps = list(steps)

    def evaluates(step: Step) -> bool:
        return callable(getattr(step, "model_key", None))

    reads_evaluations = {s for s in steps if any(map(evaluates, s.recursive_dependencies))}
    first = [s for s in steps if not evaluates(s) and s not in reads_evaluations]
    by_model: dict[str, list[Step]] = {}
    for step in steps:
        if evaluates(step):
            key = cast(Any, step).model_key()  # evaluates(step): it has one
            by_model.setdefault(key, []).append(step)
    last = [s for s in steps if not evaluates(s) and s in reads_evaluations]
    return first + [step for group in by_model.values() for step in group] + last


def print_reports(step_graph: StepGraph, workspace: Any) -> None:
    """Every report of the graph that is in the cache, with where its files are."""
    for step in step_graph.values():
        if isinstance(step.format, ReportFormat) and step in workspace.step_cache:
            location = workspace.step_info(step).result_location
            print_report(workspace.step_cache[step], location)


def install_sigterm_as_interrupt() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread (elsewhere: left alone)."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, signal.default_int_handler)
