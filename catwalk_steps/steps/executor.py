"""`catwalk::executor` (named in tango.yml): Tango's executors, with the evaluations of one model
run one after another, so that a suite loads each model once.

Without `--parallelism` steps run one at a time in this process, as Tango's default executor
runs them, in :func:`execution_order`; the process holds one loaded model at a time
(:mod:`catwalk_steps.evaluation.loaded`), released when the run ends. With `--parallelism N`
Tango's multicore executor runs them, each step in a process of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tango import Step
from tango.executor import Executor, ExecutorOutput
from tango.executors import MulticoreExecutor
from tango.step_graph import StepGraph

from ..evaluation import release_model
from .evaluate import Evaluate


@Executor.register("catwalk::executor")
class CatwalkExecutor(Executor):
    """Runs a step graph with the evaluations of each model together (see the module)."""

    def execute_step_graph(self, step_graph: StepGraph, run_name: str | None = None) -> Any:
        if self.parallelism:
            multicore = MulticoreExecutor(self.workspace, self.include_package, self.parallelism)
            return multicore.execute_step_graph(step_graph, run_name)
        ordered = StepGraph({step.name: step for step in execution_order(step_graph.values())})
        try:
            output: ExecutorOutput = super().execute_step_graph(ordered, run_name)
        finally:
            release_model()
        return output


def execution_order(steps: Iterable[Step]) -> list[Step]:
    """Tango's order (each step after its dependencies), with each model's evaluations next to
    each other: first the steps that need no evaluation (data, training), then the evaluations,
    grouped by model in the order the models first appear, then the steps that read
    evaluations (reports)."""
    steps = list(steps)
    reads_evaluations = {
        step for step in steps if any(isinstance(d, Evaluate) for d in step.recursive_dependencies)
    }
    first = [s for s in steps if not isinstance(s, Evaluate) and s not in reads_evaluations]
    by_model: dict[str, list[Step]] = {}
    for step in steps:
        if isinstance(step, Evaluate):
            by_model.setdefault(step.model_key(), []).append(step)
    last = [s for s in steps if not isinstance(s, Evaluate) and s in reads_evaluations]
    return first + [step for group in by_model.values() for step in group] + last
