"""The run's metric history, and exact validation metrics handed to it.

Each logged step's entry holds the loss, the learning rate the step used, and the throughput and
memory of the steps since the last one (:mod:`catwalk_steps.engines.throughput`); trackers
(:mod:`.trackers`) that subscribe receive every entry as it is recorded, by name, so a new
metric reaches W&B and TensorBoard without changes there.

Tango averages the validation metric over batches and ranks, which is only exact when every
batch holds the same number of instances. The loop instead has the split's kind sum each
batch's counts (`update`), adds the sums over batches and ranks, and computes the metrics once
(`compute`, :func:`~catwalk_steps.training.in_loop.kind_metrics`); this callback records them.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist
from tango.integrations.torch import TrainCallback

from ..engines.throughput import Throughput
from ..files import write_json_atomic
from ..kinds import kind_of

HISTORY_FILE = "metrics_history.json"


@TrainCallback.register("catwalk::run_metrics")
class RunMetrics(TrainCallback):
    """Keeps the history of the run: at every logged step the training loss (averaged over
    ranks), learning rate, tokens/s, seconds per step and each rank's peak memory; the metrics
    of every validation (its kind's: `acc`, `acc_norm`, `loss` for multiple choice, handed over
    by the loop through :meth:`record_validation`); and each in-loop task's (`tasks`: `{task:
    [{step, acc, acc_norm, loss, count}]}`,
    handed over by the loop through :meth:`record_task_metrics`). The main process writes the
    history to `metrics_history.json` in the step's work directory after each validation and at
    the end; checkpoints keep it (the callbacks' state).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.given: dict[str, Any] | None = None
        self.history: dict[str, Any] = {"train": [], "validation": []}
        device = torch.device(getattr(self.train_config, "device", "cpu"))
        trained = kind_of(self.dataset_dict[self.train_config.train_split])
        self.throughput = Throughput(device, self.train_config.is_distributed, trained.batch_tokens)
        self.step_lr: float | None = None
        self.listeners: list[Any] = []

    def subscribe(self, listener: Any) -> None:
        """`listener.record(section, entry)` is called with each entry as it is recorded."""
        self.listeners.append(listener)

    def record(self, section: str, entry: dict[str, Any]) -> None:
        self.history[section].append(entry)
        for listener in self.listeners:
            listener.record(section, entry)

    def pre_batch(self, step: int, epoch: int, batch: list[Any]) -> None:
        self.throughput.step_started(batch)
        optimizer = getattr(self.training_engine, "optimizer", None)
        self.step_lr = float(optimizer.param_groups[0]["lr"]) if optimizer is not None else None

    def log_batch(
        self, step: int, epoch: int, batch_loss: float, batch_outputs: list[dict[str, Any]]
    ) -> None:
        entry: dict[str, Any] = {"step": step + 1, "loss": batch_loss}
        for metrics in batch_outputs:  # the loop's metrics of the step (GRPO's), by name
            entry.update(metrics)
        if self.step_lr is not None:
            entry["lr"] = self.step_lr
        self.record("train", {**entry, **self.throughput.measure()})

    def pre_val_batch(self, step: int, val_step: int, epoch: int, val_batch: Any) -> None:
        if val_step == 0:
            self.given = None
            self.throughput.pause()

    def record_validation(self, metrics: dict[str, Any]) -> None:
        """A validation's metrics, as the split's kind computes them (exact over all batches
        and ranks: :meth:`~catwalk_steps.kinds.TaskKind.compute`), for its history entry."""
        self.given = dict(metrics)

    def post_val_loop(
        self, step: int, epoch: int, val_metric: float, best_val_metric: float
    ) -> None:
        entry = {"step": step + 1, **(self.given or {"count": 0})}
        entry["count"] = int(entry["count"])
        self.record("validation", entry)
        self.write_history()
        self.throughput.resume()

    def record_task_metrics(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        """The in-loop tasks' metrics after step `step` (0-based), exact over all ranks."""
        for name, metrics in results.items():
            entry = {"step": step + 1, **metrics}
            self.history.setdefault("tasks", {}).setdefault(name, []).append(entry)
            for listener in self.listeners:
                listener.record(f"tasks/{name}", entry)

    def post_train_loop(self, step: int, epoch: int) -> None:
        self.write_history()

    def write_history(self) -> None:
        if self.train_config.is_local_main_process:
            write_json_atomic(self.train_config.work_dir / HISTORY_FILE, self.history)

    def state_dict(self) -> dict[str, Any]:
        # A copy: what is logged after the checkpoint must not leak into it.
        return {"history": copy.deepcopy(self.history)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A resumed run keeps what it logged before the checkpoint and nothing after it.
        self.history = copy.deepcopy(state_dict["history"])


def summed_over_ranks(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each named scalar summed over every rank, in one all-reduce (every rank must call)."""
    names = sorted(values)
    stacked = torch.stack([values[name].reshape(()) for name in names])
    dist.all_reduce(stacked)
    return dict(zip(names, stacked.unbind(), strict=True))
