"""Exact validation metrics inside Tango's training loop, and the run's metric history.

Each logged step's entry holds the loss, the learning rate the step used, and the throughput and
memory of the steps since the last one (:mod:`catwalk_steps.engines.throughput`); trackers
(:mod:`.trackers`) that subscribe receive every entry as it is recorded, by name, so a new
metric reaches W&B and TensorBoard without changes there.

Tango averages the validation metric over batches and ranks, which is only exact when every
batch holds the same number of instances. This callback keeps running sums of right answers,
instance counts and loss across batches and ranks instead, and hands Tango the exact global
value after each batch. Every rank joins the all-reduce, as every rank runs every batch.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import TrainCallback

from ..engines.throughput import Throughput
from ..files import write_json_atomic

HISTORY_FILE = "metrics_history.json"


@TrainCallback.register("catwalk::run_metrics")
class RunMetrics(TrainCallback):
    """Turns per-batch counts into exact `acc`, `acc_norm` and `loss` over the whole split, and
    keeps the history of the run: at every logged step the training loss (averaged over ranks),
    learning rate, tokens/s, seconds per step and each rank's peak memory; the metrics of every
    validation; and each in-loop task's (`tasks`: `{task: [{step, acc, acc_norm, count}]}`,
    handed over by the loop through :meth:`record_task_metrics`). The main process writes the
    history to `metrics_history.json` in the step's work directory after each validation and at
    the end; checkpoints keep it (the callbacks' state).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.totals: dict[str, float] | None = None
        self.given: dict[str, Any] | None = None
        self.history: dict[str, Any] = {"train": [], "validation": []}
        device = torch.device(getattr(self.train_config, "device", "cpu"))
        self.throughput = Throughput(device, self.train_config.is_distributed)
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
        if self.step_lr is not None:
            entry["lr"] = self.step_lr
        self.record("train", {**entry, **self.throughput.measure()})

    def pre_val_batch(self, step: int, val_step: int, epoch: int, val_batch: Any) -> None:
        if val_step == 0:
            self.totals = None
            self.given = None
            self.throughput.pause()

    def record_validation(self, metrics: dict[str, Any]) -> None:
        """A validation split scored by its answers (generation: `exact_match,...`, `count`),
        exact over all ranks, for this validation's history entry."""
        self.given = dict(metrics)

    def post_val_batch(self, step: int, val_step: int, epoch: int, val_batch_outputs: dict) -> None:
        missing = {"correct", "correct_norm", "count", "loss"} - val_batch_outputs.keys()
        if missing:
            raise ConfigurationError(
                f"catwalk::train: the model's forward returned no {sorted(missing)}; "
                "use a catwalk::rank_classifier model"
            )
        count = val_batch_outputs["count"].detach().float()
        batch = {
            "correct": val_batch_outputs["correct"].detach().float(),
            "correct_norm": val_batch_outputs["correct_norm"].detach().float(),
            "count": count,
            "loss_sum": val_batch_outputs["loss"].detach().float() * count,
        }
        batch = summed_over_ranks(batch) if self.train_config.is_distributed else batch
        totals = self.totals or dict.fromkeys(batch, 0.0)
        self.totals = {name: totals[name] + float(value) for name, value in batch.items()}
        for name, value in self.metrics().items():
            val_batch_outputs[name] = torch.tensor(value)

    def metrics(self) -> dict[str, float]:
        """Exact metrics over the batches validated so far."""
        assert self.totals is not None
        sums = self.totals
        count = max(sums["count"], 1.0)
        return {
            "acc": sums["correct"] / count,
            "acc_norm": sums["correct_norm"] / count,
            "loss": sums["loss_sum"] / count,
            "count": sums["count"],
        }

    def post_val_loop(
        self, step: int, epoch: int, val_metric: float, best_val_metric: float
    ) -> None:
        entry = {"step": step + 1, **(self.given or self.metrics())}
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
