"""The training loop every worker runs: Tango's engines, data loaders and callbacks, driven step
by step, with checkpoints that survive a crash.

What it does differently from Tango's `torch::train` loop, and why:

- A checkpoint is complete-marked and resumable on any number of ranks (:mod:`.checkpointing`),
  and it holds everything the next steps depend on: model, optimizer (consolidated when it is
  sharded), LR scheduler, grad scaler, every rank's random generators, the data position, the
  step, the best validation metric and the callbacks' state. A resumed run ends bit for bit
  where an uninterrupted one ends (float32, CPU).
- The data loader is fast-forwarded by position (epoch, batches into it) without collating the
  skipped batches.
- Validation callbacks run before the checkpoint of the same step, so the metric history that a
  checkpoint holds includes its own validation, and the in-loop task suite's scores
  (:mod:`.in_loop`).

Each concern is one method of :class:`Trainer`; checkpoints are :mod:`.checkpointing`'s, and
:mod:`catwalk_steps.launch` starts the workers that run it.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import islice
from typing import Any, cast

import torch
import torch.distributed as dist
from more_itertools import chunked
from tango.common import Tqdm
from tango.integrations.torch import DataLoader, StopEarly, TrainCallback
from torch.utils.data import DistributedSampler

from ..distributed.groups import barrier, distributed_position
from ..engines.base import CatwalkEngine
from ..engines.train_config import NodeAwareTrainConfig
from ..objectives import updates_per_batch
from .checkpointing import Checkpointer
from .in_loop import InLoopTasks
from .job import Schedule, TrainerState, TrainingJob, training_items, validation_items
from .sampled import sampled_training
from .streaming import train_loader
from .trackers import connect_trackers
from .validation import Validation

logger = logging.getLogger(__name__)


def seed_everything(seed: int, device: torch.device) -> None:
    """The same start on every rank (as Tango): Python, NumPy, torch and the worker's GPU."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)


def epoch_batches(loader: DataLoader, epoch: int, skip: int) -> Iterator[Any]:
    """The batches of `epoch` from the `skip`-th on. Loaders that can (`catwalk::sharded`) jump
    there without collating the skipped batches; others are iterated through them."""
    jump = getattr(loader, "epoch_batches", None)
    if jump is not None:
        return jump(epoch, skip)
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, DistributedSampler):
        sampler.set_epoch(epoch)
    return islice(iter(loader), skip, None)


def mean_over_ranks(value: float, world_size: int, device: Any) -> float:
    if world_size == 1:
        return value
    tensor = torch.tensor(value, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.item() / world_size


def repeated(chunks: Iterable[list], sampled: Any, state: TrainerState) -> Iterator[list[Any]]:
    """Each optimizer step's micro-batches, as many times as steps train on them (GRPO's μ:
    one step's prompts are a generation batch, trained on μ times, fewer after a resume inside
    it; else once); the data position moves past them before their last (a checkpoint inside
    the generation batch resumes it)."""
    for micro_batches in chunks:
        for left in reversed(range(1 if sampled is None else sampled.repeats(state.step))):
            if left == 0:
                state.batches_into_epoch += len(micro_batches)
            yield micro_batches


def progress_metrics(loss: float, name: str, state: TrainerState) -> dict[str, float]:
    """What the progress bar shows: the batch's loss, the last and best validation metric."""
    metrics = {"batch_loss": loss}
    if state.val_metric is not None:
        metrics[f"val_{name}"] = state.val_metric
        metrics[f"best_{name}"] = state.best_val_metric  # type: ignore[assignment]
    return metrics


class Trainer:
    """One worker's training: its engine, loaders and callbacks, step by step."""

    def __init__(self, job: TrainingJob, config: NodeAwareTrainConfig):
        self.job = job
        self.rank, self.world_size = distributed_position()
        self.device = config.worker_local_default_device
        seed_everything(job.schedule.seed, self.device)
        # The loaders first (they draw nothing from the global generators): `train_steps` is
        # known then, and the engine and callbacks get the config that says it.
        self.schedule = self.build_loaders(job)
        self.config = replace(config, train_steps=self.schedule.train_steps)
        # A catwalk engine: the loop asks it for its checkpoint state and its loss checks.
        self.engine = cast(
            CatwalkEngine,
            job.training_engine.construct(
                train_config=self.config, model=job.model, inner_modules=job.inner_modules
            ),
        )
        self.callbacks: list[TrainCallback] = [
            callback.construct(
                workspace=job.workspace,
                train_config=self.config,
                training_engine=self.engine,
                dataset_dict=job.dataset_dict,
                train_dataloader=self.train_loader,
                validation_dataloader=self.validation_loader,
            )
            for callback in job.callbacks
        ]
        connect_trackers(self.callbacks)  # W&B, TensorBoard: fed by the metric history
        self.state = TrainerState()
        # GRPO: completions sampled, rewarded and trained on in each step; None for the others.
        self.sampled = sampled_training(self.engine, self.schedule, job.work_dir, job.reference)
        self.logged: list[dict[str, float]] = []  # the last step's metrics beside its loss
        self.checkpoints = Checkpointer(
            job, self.schedule, self.engine, self.callbacks, grpo=self.sampled
        )

    def build_loaders(self, job: TrainingJob) -> Schedule:
        """The loaders of the two splits, and the job's schedule with `train_steps` (from the
        loader's length when it gives epochs)."""
        schedule = job.schedule
        train = training_items(job, schedule)
        self.train_loader = train_loader(job.train_dataloader, train)  # (or a stream's)
        default_seed = getattr(self.train_loader, "use_default_seed", None)
        if default_seed is not None:
            default_seed(schedule.seed)
        self.validation_loader = None
        if schedule.validation_split is not None:
            loader = job.validation_dataloader or job.train_dataloader
            items = validation_items(job, schedule.validation_split)
            self.validation_loader = loader.construct(dataset=items)
        self.validation = None
        if self.validation_loader is not None:
            split = job.dataset_dict[cast(str, schedule.validation_split)]  # where it validates
            self.validation = Validation(
                self.validation_loader,
                split,
                schedule.validation_steps,
                self.device,
                self.world_size,
            )
        loader = job.validation_dataloader or job.train_dataloader
        self.tasks = InLoopTasks(job.evaluate_tasks, loader, self.world_size > 1)
        if schedule.train_steps is not None:
            return schedule
        batches = len(self.train_loader) * (schedule.train_epochs or 1)
        steps = math.ceil(batches / schedule.grad_accum) * updates_per_batch(schedule.model)
        return replace(schedule, train_steps=steps)

    @property
    def main(self) -> bool:
        return self.rank == 0

    # --- The loop -------------------------------------------------------------------------

    def run(self) -> None:
        """Resumes if it can and trains to `train_steps`; the best checkpoint is the result."""
        self.checkpoints.prepare()
        self.state = self.checkpoints.resume() or self.state
        barrier()
        for callback in self.callbacks:
            callback.pre_train_loop()
        progress = Tqdm.tqdm(
            total=self.schedule.train_steps,
            initial=self.state.step,
            desc=f"Training {self.job.step_name}",
            disable=not self.main,
        )
        try:
            for micro_batches in self.batches():
                loss = self.train_step(micro_batches)
                step = self.state.step - 1  # 0-based index of the step just taken
                self.after_step(step, loss, progress)
                if self.state.step > self.schedule.final_step:
                    break
            for callback in self.callbacks:
                callback.post_epoch(self.state.step - 1, self.state.epoch)
        except StopEarly:
            if self.main:
                logger.info("Stopping early at step %d", self.state.step)
            self.checkpoints.save(self.state, validated=False)
        finally:
            progress.close()
        for callback in self.callbacks:
            callback.post_train_loop(self.state.step - 1, self.state.epoch)

    def batches(self) -> Iterator[list[Any]]:
        """Micro-batches of each optimizer step, from the saved position on; epochs restart the
        grouping into `grad_accum` micro-batches, as in Tango. None once `train_steps` are
        taken (a run resumed at its last checkpoint trains nothing)."""
        if self.state.step > self.schedule.final_step:
            return
        first_epoch = True
        while True:
            epoch = self.state.epoch
            skip = self.state.batches_into_epoch if first_epoch else 0
            if not first_epoch or skip == 0:
                for callback in self.callbacks:
                    callback.pre_epoch(self.state.step, epoch)
            first_epoch = False
            empty = True
            loaded = epoch_batches(self.train_loader, epoch, skip)
            chunks = chunked(loaded, self.schedule.grad_accum)
            for micro_batches in repeated(chunks, self.sampled, self.state):
                empty = False
                yield micro_batches
            if empty and skip == 0:
                raise RuntimeError(f"{self.schedule.train_split}: the data loader yields no batch")
            for callback in self.callbacks:
                callback.post_epoch(self.state.step - 1, epoch)
            self.state.epoch += 1
            self.state.batches_into_epoch = 0

    def train_step(self, micro_batches: list[Any]) -> float:
        """Forward and backward over the micro-batches, then one optimizer step."""
        step = self.state.step
        for callback in self.callbacks:
            callback.pre_batch(step, self.state.epoch, micro_batches)
        if self.sampled is not None:  # the prompts' completions, rewarded: the model's batches
            micro_batches = self.sampled.batches(micro_batches, step)
        loss_sum = 0.0
        outputs = []
        for index, micro_batch in enumerate(micro_batches):
            loss, micro_outputs = self.engine.forward_train(micro_batch, index, len(micro_batches))
            self.engine.check_loss(loss, step + 1)
            loss_sum += loss.detach().item()
            outputs.append(
                {k: v.detach() if torch.is_tensor(v) else v for k, v in micro_outputs.items()}
            )
            self.engine.backward(loss)
        if self.sampled is not None:
            self.logged = self.sampled.metrics(outputs)
        for callback in self.callbacks:
            callback.post_batch(step, self.state.epoch, loss_sum, outputs)
        self.engine.step()
        self.state.step += 1
        return loss_sum

    def after_step(self, step: int, loss: float, progress: Any) -> None:
        """Logging, validation and checkpoint of the step just taken, in that order."""
        validates = self.schedule.validates(step)
        if self.schedule.logs(step) or validates:
            loss = self.mean_over_ranks(loss)
        if self.schedule.logs(step):
            for callback in self.callbacks:
                callback.log_batch(step, self.state.epoch, loss, self.logged)
            progress.set_postfix(**self.progress_metrics(loss))
        progress.update(1)
        if validates:
            self.validate(step)
            progress.set_postfix(**self.progress_metrics(loss))
        if self.schedule.checkpoints(step):
            self.checkpoints.save(self.state, validated=validates)

    def mean_over_ranks(self, value: float) -> float:
        return mean_over_ranks(value, self.world_size, self.device)

    def progress_metrics(self, loss: float) -> dict[str, float]:
        return progress_metrics(loss, self.schedule.val_metric_name, self.state)

    def validate(self, step: int) -> None:
        """Every rank runs every validation batch (sharded engines need it); the metric is exact
        over the whole split and all ranks. Then the in-loop tasks, then the history entry."""
        self.engine.model.eval()
        assert self.validation is not None
        at, main = (self.state.step - 1, self.state.epoch), self.main
        metrics = self.validation.metrics(self.engine, self.callbacks, at, main)
        metric = float(metrics[self.schedule.val_metric_name])
        self.engine.model.train()
        self.state.val_metric = metric
        if self.schedule.better(metric, self.state.best_val_metric):
            self.state.best_val_metric = metric
        # In-loop tasks, recorded (RunMetrics) before post_val_loop writes this step's history.
        self.tasks.run(step, self.engine, self.callbacks, show_progress=self.main)
        for callback in self.callbacks:
            best = cast(float, self.state.best_val_metric)  # set above: better(x, None) is True
            callback.post_val_loop(step, self.state.epoch, metric, best)
        self.engine.model.train()  # again, in case a callback changed it
