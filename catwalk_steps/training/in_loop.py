"""In-loop evaluation of a task suite: every `validate_every` steps the model being trained is
scored on each of `evaluate_tasks`, under whatever engine trains it.

Each rank scores its share of a task's instances (the same sharded loader as validation, padded
with zero-weight items so every rank runs the same number of forwards through the root wrapper,
as sharded engines need); right answers and counts are summed locally and then over ranks in one
all-reduce per task, so the numbers are exact: the same as a separate `catwalk::evaluate` of the
checkpoint written at that step (same precision, same `max_length`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from tango.common import Lazy, Tqdm
from tango.integrations.torch import DataLoader, TrainingEngine

from ..distributed.exchange import broadcast_data, gather_data
from ..engines.scorer import engine_scorer
from ..kinds import Scorer, TaskKind, kind_of
from .callbacks import summed_over_ranks


class InLoopTasks:
    """The tasks' loaders (built once per worker) and their scoring."""

    def __init__(
        self,
        tasks: Mapping[str, Sequence[Any]],
        loader: Lazy[DataLoader],
        distributed: bool,
    ):
        self.loaders = {name: loader.construct(dataset=list(data)) for name, data in tasks.items()}
        self.instances = {name: list(data) for name, data in tasks.items()}
        self.distributed = distributed

    def run(
        self, step: int, engine: TrainingEngine, callbacks: list[Any], show_progress: bool
    ) -> None:
        """Scores every task after step `step` (0-based) and hands the scores to the callbacks
        that keep histories (`record_task_metrics`: RunMetrics). Collective."""
        if not self.loaders:
            return
        results = self.evaluate(engine, show_progress)
        for callback in callbacks:
            record = getattr(callback, "record_task_metrics", None)
            if record is not None:
                record(step, results)

    def evaluate(self, engine: TrainingEngine, show_progress: bool) -> dict[str, dict[str, Any]]:
        """Each task's metrics over every instance, as its kind computes them (`acc`, `acc_norm`;
        an olmo_eval label's, as olmo_eval's `ICLMetric`; a generative task's `<metric>,<filter>`
        means), with `count`. Collective."""
        engine.model.eval()
        scorer = engine_scorer(engine, self.distributed)
        results = {}
        for name, loader in self.loaders.items():
            instances = self.instances[name]
            batches = Tqdm.tqdm(
                loader, desc=f"Scoring {name}", leave=False, disable=not show_progress
            )
            results[name] = kind_metrics(
                kind_of(instances),
                scorer,
                batches,
                instances,
                engine.train_config.worker_local_default_device,  # the engine's `device`
                self.distributed,
            )
        engine.model.train()
        return results


def kind_metrics(
    kind: TaskKind,
    scorer: Scorer,
    batches: Iterable[Any],
    instances: Sequence[Any],
    device: torch.device,
    distributed: bool,
    validating: bool = False,
) -> dict[str, Any]:
    """A kind's metrics over `instances`, of which `batches` are this rank's share: each
    batch's sums (`update`) added over batches, then over ranks, then `compute` (`validating`:
    a training run's validation split). Collective."""
    sums: dict[str, float] = {}
    for batch in batches:
        for key, value in kind.update(scorer, batch).items():
            sums[key] = sums.get(key, 0.0) + value
    assert sums, "no batch to score"
    return kind.compute(over_ranks(sums, device, distributed), instances, validating)


def over_ranks(sums: dict[str, float], device: torch.device, distributed: bool) -> dict[str, float]:
    """Every rank's sums added (one all-reduce, in float64). A key some rank lacks (a subtask
    of a grouped task that no instance of its share belongs to) counts 0 there."""
    if distributed:
        keys = gather_data(sorted(sums), 0, device)
        every = broadcast_data(sorted(set().union(*keys)) if keys is not None else None, 0, device)
        sums = {key: sums.get(key, 0.0) for key in every}
    values = {
        key: torch.tensor(value, dtype=torch.float64, device=device) for key, value in sums.items()
    }
    if distributed:
        values = summed_over_ranks(values)
    return {key: float(value) for key, value in values.items()}
