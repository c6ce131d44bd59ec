"""A training run's validation: its split scored as the split's kind scores it, the same way
as the in-loop tasks (:func:`~.in_loop.kind_metrics`): each batch's sums through the engine's
root forward on every rank (`update`: sharded engines need every rank in every forward), added
over batches and ranks, then `compute`. One path for every kind: multiple choice (`acc`,
`acc_norm` and the training `loss`), an ai2-olmo-eval label's metrics, a generative task's."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any

import torch
from tango.common import Tqdm
from tango.integrations.torch import DataLoader, TrainCallback, TrainingEngine

from ..engines.scorer import engine_scorer
from ..kinds import kind_of
from .in_loop import kind_metrics


class Validation:
    """A validation split's loader, how many of its batches are scored, its kind, and where
    its sums are added (this worker's device; over `world_size` ranks)."""

    def __init__(
        self,
        loader: DataLoader,
        instances: Sequence[Any],
        steps: int | None,
        device: torch.device,
        world_size: int,
    ):
        self.loader, self.instances = loader, instances
        self.steps = len(loader) if steps is None else steps
        self.kind = kind_of(list(instances[:1]))
        self.device, self.distributed = device, world_size > 1

    def metrics(
        self,
        engine: TrainingEngine,
        callbacks: list[TrainCallback],
        at: tuple[int, int],
        show_progress: bool,
    ) -> dict[str, Any]:
        """The split's metrics after step `at[0]` (0-based) of epoch `at[1]`, exact over the
        split and all ranks. Each callback is told of each batch (`pre_val_batch`), and those
        that keep the history receive the metrics (`record_validation`). Collective."""
        step, epoch = at

        def announced(progress: Any) -> Iterator[Any]:
            for val_step, batch in enumerate(progress):
                for callback in callbacks:
                    callback.pre_val_batch(step, val_step, epoch, batch)
                yield batch

        scorer = engine_scorer(engine, self.distributed)
        batches = islice(self.loader, self.steps)
        with Tqdm.tqdm(
            batches, desc="Validating", total=self.steps, leave=False, disable=not show_progress
        ) as progress:
            metrics = kind_metrics(
                self.kind,
                scorer,
                announced(progress),
                self.instances,
                self.device,
                self.distributed,
                validating=True,
            )
        for callback in callbacks:
            record = getattr(callback, "record_validation", None)
            if record is not None:
                record(metrics)
        return metrics
