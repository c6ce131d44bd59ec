"""Exact validation metrics inside Tango's training loop, and the run's metric history.

Tango averages the validation metric over batches and ranks, which is only exact when every
batch holds the same number of instances. This callback keeps running sums of right answers,
instance counts and loss across batches and ranks instead, and hands Tango the exact global
value after each batch. Every rank joins the all-reduce, as every rank runs every batch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import TrainCallback

HISTORY_FILE = "metrics_history.json"
_SUMMED = ("correct", "correct_norm", "count", "loss_sum")


@TrainCallback.register("catwalk::run_metrics")
class RunMetrics(TrainCallback):
    """Turns per-batch counts into exact `acc`, `acc_norm` and `loss` over the whole split, and
    keeps the history of the run: the training loss at every logged step (averaged over ranks by
    Tango) and the metrics of every validation. The main process writes the history to
    `metrics_history.json` in the step's work directory after each validation and at the end.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.totals: torch.Tensor | None = None
        self.history: dict[str, list[dict[str, Any]]] = {"train": [], "validation": []}

    def log_batch(
        self, step: int, epoch: int, batch_loss: float, batch_outputs: list[dict[str, Any]]
    ) -> None:
        self.history["train"].append({"step": step + 1, "loss": batch_loss})

    def pre_val_batch(self, step: int, val_step: int, epoch: int, val_batch: Any) -> None:
        if val_step == 0:
            self.totals = None

    def post_val_batch(self, step: int, val_step: int, epoch: int, val_batch_outputs: dict) -> None:
        missing = {"correct", "correct_norm", "count", "loss"} - val_batch_outputs.keys()
        if missing:
            raise ConfigurationError(
                f"catwalk::train: the model's forward returned no {sorted(missing)}; "
                "use a catwalk::rank_classifier model"
            )
        count = val_batch_outputs["count"].detach().float()
        batch = torch.stack(
            [
                val_batch_outputs["correct"].detach().float(),
                val_batch_outputs["correct_norm"].detach().float(),
                count,
                val_batch_outputs["loss"].detach().float() * count,
            ]
        )
        if self.train_config.is_distributed:
            dist.all_reduce(batch)
        self.totals = batch if self.totals is None else self.totals + batch
        for name, value in self.metrics().items():
            val_batch_outputs[name] = torch.tensor(value)

    def metrics(self) -> dict[str, float]:
        """Exact metrics over the batches validated so far."""
        assert self.totals is not None
        sums = dict(zip(_SUMMED, self.totals.tolist(), strict=True))
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
        entry = {"step": step + 1, **self.metrics()}
        entry["count"] = int(entry["count"])
        self.history["validation"].append(entry)
        self.write_history()

    def post_train_loop(self, step: int, epoch: int) -> None:
        self.write_history()

    def write_history(self) -> None:
        if self.train_config.is_local_main_process:
            write_json_atomic(self.train_config.work_dir / HISTORY_FILE, self.history)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A resumed run keeps what it logged before the checkpoint and nothing after it.
        self.history = {key: list(entries) for key, entries in state_dict["history"].items()}


def write_json_atomic(path: Path, value: Any) -> None:
    """Writes JSON through a temporary file and `os.replace`, so readers never see half a file."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(value, indent=2) + "\n")
    os.replace(temporary, path)
