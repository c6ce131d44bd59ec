"""The training loop every worker runs: Tango's engines, data loaders and callbacks, driven step
by step, with checkpoints that survive a crash.

What it does differently from Tango's `torch::train` loop, and why:

- A checkpoint is complete-marked and resumable on any number of ranks (:mod:`.checkpoints`),
  and it holds everything the next steps depend on: model, optimizer (consolidated when it is
  sharded), LR scheduler, grad scaler, every rank's random generators, the data position, the
  step, the best validation metric and the callbacks' state. A resumed run ends bit for bit
  where an uninterrupted one ends (float32, CPU).
- The data loader is fast-forwarded by position (epoch, batches into it) without collating the
  skipped batches.
- Validation callbacks run before the checkpoint of the same step, so the metric history that a
  checkpoint holds includes its own validation.

Each concern is one method of :class:`Trainer`; :mod:`.launch` starts the workers that run it.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from more_itertools import chunked
from tango.common import DatasetDictBase, Lazy, Tqdm
from tango.integrations.torch import (
    DataLoader,
    Model,
    StopEarly,
    TrainCallback,
    TrainingEngine,
)
from torch.utils.data import DistributedSampler

from .checkpoints import (
    BEST,
    LATEST,
    TRAINER_FILE,
    CheckpointError,
    checkpoint_dir,
    complete_checkpoints,
    load_file,
    mark_complete,
    point,
    problem_with,
    remove_partial,
    remove_stale,
    restore_rng_state,
    rng_state,
)
from .devices import DevicePlan
from .distributed import Rendezvous, barrier, distributed_position
from .files import torch_save_atomic
from .train_config import NodeAwareTrainConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Schedule:
    """When to step, log, validate and checkpoint (the keys of `catwalk::train`)."""

    train_steps: int | None = None  # or train_epochs; resolved by the worker (loader length)
    train_epochs: int | None = None
    train_split: str = "train"
    validation_split: str | None = "validation"
    validation_steps: int | None = None
    seed: int = 42
    grad_accum: int = 1
    log_every: int = 10
    checkpoint_every: int = 100
    validate_every: int | None = None
    val_metric_name: str = "acc"
    minimize_val_metric: bool = False
    remove_stale_checkpoints: bool = True

    def logs(self, step: int) -> bool:
        """Step `step` (0-based) is logged: the first, every `log_every`-th, the last."""
        return step == 0 or (step + 1) % self.log_every == 0 or step == self.train_steps - 1

    def validates(self, step: int) -> bool:
        if self.validation_split is None:
            return False
        every = self.validate_every is not None and (step + 1) % self.validate_every == 0
        return every or step == self.train_steps - 1

    def checkpoints(self, step: int) -> bool:
        return (step + 1) % self.checkpoint_every == 0 or step == self.train_steps - 1

    def better(self, value: float, than: float | None) -> bool:
        """`value` is at least as good as `than` (ties go to the later one, as in Tango)."""
        if than is None:
            return True
        return value <= than if self.minimize_val_metric else value >= than


@dataclass
class TrainingJob:
    """Everything a worker needs to train; pickled to each worker (and to the other nodes)."""

    step_id: str
    step_name: str
    work_dir: Path
    model: Lazy[Model]
    training_engine: Lazy[TrainingEngine]
    dataset_dict: DatasetDictBase
    train_dataloader: Lazy[DataLoader]
    validation_dataloader: Lazy[DataLoader] | None
    callbacks: list[Lazy[TrainCallback]]
    schedule: Schedule
    devices: DevicePlan
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    include_package: tuple[str, ...] = ()
    resume_from: Path | None = None
    workspace: Any = None  # handed to callbacks, as Tango does

    @property
    def local_world_size(self) -> int:
        return len(self.devices.devices)

    @property
    def world_size(self) -> int:
        return self.local_world_size * self.rendezvous.num_nodes


@dataclass
class TrainerState:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0
    batches_into_epoch: int = 0  # of `epoch`, consumed by the steps taken
    val_metric: float | None = None
    best_val_metric: float | None = None
    best_checkpoint_metric: float | None = None
    best_checkpoint: str | None = None  # directory name


def seed_everything(seed: int, device: torch.device) -> None:
    """The same start on every rank (as Tango): Python, NumPy, torch and the worker's GPU."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)


def train_config_for(job: TrainingJob, rank: int, local_rank: int) -> NodeAwareTrainConfig:
    s = job.schedule
    return NodeAwareTrainConfig(
        step_id=job.step_id,
        work_dir=job.work_dir,
        step_name=job.step_name,
        worker_id=rank,
        train_split=s.train_split,
        validation_split=s.validation_split,
        seed=s.seed,
        train_steps=s.train_steps,
        grad_accum=s.grad_accum,
        log_every=s.log_every,
        checkpoint_every=s.checkpoint_every,
        validate_every=s.validate_every,
        validation_steps=s.validation_steps,
        is_distributed=job.world_size > 1,
        distributed_address=job.rendezvous.host,
        distributed_port=job.rendezvous.port,
        val_metric_name=s.val_metric_name,
        minimize_val_metric=s.minimize_val_metric,
        auto_aggregate_val_metric=False,
        remove_stale_checkpoints=s.remove_stale_checkpoints,
        world_size=job.world_size,
        local_rank=local_rank,
        local_world_size=job.local_world_size,
        num_nodes=job.rendezvous.num_nodes,
        device=str(job.devices.device(local_rank)),
    )


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


class Trainer:
    """One worker's training: its engine, loaders and callbacks, step by step."""

    def __init__(self, job: TrainingJob, config: NodeAwareTrainConfig):
        self.job = job
        self.schedule = job.schedule
        self.config = config
        self.rank, self.world_size = distributed_position()
        self.device = config.worker_local_default_device
        seed_everything(self.schedule.seed, self.device)
        self.engine: TrainingEngine = job.training_engine.construct(
            train_config=config, model=job.model
        )
        data = job.dataset_dict
        self.train_loader = job.train_dataloader.construct(dataset=data[self.schedule.train_split])
        default_seed = getattr(self.train_loader, "use_default_seed", None)
        if default_seed is not None:
            default_seed(self.schedule.seed)
        self.validation_loader = None
        if self.schedule.validation_split is not None:
            loader = job.validation_dataloader or job.train_dataloader
            self.validation_loader = loader.construct(dataset=data[self.schedule.validation_split])
        if self.schedule.train_steps is None:
            steps = math.ceil(
                len(self.train_loader)
                * (self.schedule.train_epochs or 1)
                / self.schedule.grad_accum
            )
            self.schedule = replace(self.schedule, train_steps=steps)
            config.train_steps = steps
        self.validation_steps = self.schedule.validation_steps
        if self.validation_loader is not None and self.validation_steps is None:
            self.validation_steps = len(self.validation_loader)
        self.callbacks: list[TrainCallback] = [
            callback.construct(
                workspace=job.workspace,
                train_config=config,
                training_engine=self.engine,
                dataset_dict=data,
                train_dataloader=self.train_loader,
                validation_dataloader=self.validation_loader,
            )
            for callback in job.callbacks
        ]
        self.state = TrainerState()

    @property
    def main(self) -> bool:
        return self.rank == 0

    # --- The loop -------------------------------------------------------------------------

    def run(self) -> None:
        """Resumes if it can and trains to `train_steps`; the best checkpoint is the result."""
        if self.main:
            remove_partial(self.job.work_dir)
            from .export import write_model_files

            write_model_files(self.engine.model, self.job.work_dir)
        barrier()
        self.resume()
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
                if self.state.step >= self.schedule.train_steps:
                    break
            for callback in self.callbacks:
                callback.post_epoch(self.state.step - 1, self.state.epoch)
        except StopEarly:
            if self.main:
                logger.info("Stopping early at step %d", self.state.step)
            self.save_checkpoint(validated=False)
        finally:
            progress.close()
        for callback in self.callbacks:
            callback.post_train_loop(self.state.step - 1, self.state.epoch)

    def batches(self) -> Iterator[list[Any]]:
        """Micro-batches of each optimizer step, from the saved position on; epochs restart the
        grouping into `grad_accum` micro-batches, as in Tango."""
        first_epoch = True
        while True:
            epoch = self.state.epoch
            skip = self.state.batches_into_epoch if first_epoch else 0
            if not first_epoch or skip == 0:
                for callback in self.callbacks:
                    callback.pre_epoch(self.state.step, epoch)
            first_epoch = False
            empty = True
            for micro_batches in chunked(
                epoch_batches(self.train_loader, epoch, skip), self.schedule.grad_accum
            ):
                empty = False
                self.state.batches_into_epoch += len(micro_batches)
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
        loss_sum = 0.0
        outputs = []
        for index, micro_batch in enumerate(micro_batches):
            loss, micro_outputs = self.engine.forward_train(micro_batch, index, len(micro_batches))
            loss_sum += loss.detach().item()
            outputs.append(
                {k: v.detach() if torch.is_tensor(v) else v for k, v in micro_outputs.items()}
            )
            self.engine.backward(loss)
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
                callback.log_batch(step, self.state.epoch, loss, [])
            progress.set_postfix(**self.progress_metrics(loss))
        progress.update(1)
        if validates:
            self.validate(step)
            progress.set_postfix(**self.progress_metrics(loss))
        if self.schedule.checkpoints(step):
            self.save_checkpoint(validated=validates)

    def mean_over_ranks(self, value: float) -> float:
        if self.world_size == 1:
            return value
        tensor = torch.tensor(value, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.item() / self.world_size

    def progress_metrics(self, loss: float) -> dict[str, float]:
        metrics = {"batch_loss": loss}
        name = self.schedule.val_metric_name
        if self.state.val_metric is not None:
            metrics[f"val_{name}"] = self.state.val_metric
            metrics[f"best_{name}"] = self.state.best_val_metric  # type: ignore[assignment]
        return metrics

    def validate(self, step: int) -> None:
        """Every rank runs every validation batch (sharded engines need it); the callbacks
        (`RunMetrics`) make the metric exact over the whole split and all ranks."""
        assert self.validation_loader is not None
        self.engine.model.eval()
        metric: float | None = None
        batches = islice(self.validation_loader, self.validation_steps)
        with Tqdm.tqdm(
            batches,
            desc="Validating",
            total=self.validation_steps,
            leave=False,
            disable=not self.main,
        ) as progress:
            for val_step, batch in enumerate(progress):
                for callback in self.callbacks:
                    callback.pre_val_batch(step, val_step, self.state.epoch, batch)
                outputs = self.engine.forward_eval(batch)
                for callback in self.callbacks:
                    callback.post_val_batch(step, val_step, self.state.epoch, outputs)
                value = outputs[self.schedule.val_metric_name]
                metric = float(value.item() if torch.is_tensor(value) else value)
        self.engine.model.train()
        assert metric is not None, "the validation loader yielded no batch"
        self.state.val_metric = metric
        if self.schedule.better(metric, self.state.best_val_metric):
            self.state.best_val_metric = metric
        for callback in self.callbacks:
            callback.post_val_loop(step, self.state.epoch, metric, self.state.best_val_metric)
        self.engine.model.train()  # again, in case a callback changed it

    # --- Checkpoints ----------------------------------------------------------------------

    def save_checkpoint(self, validated: bool) -> None:
        """Every rank writes its part; rank 0 marks the directory complete only after all parts
        are on disk, then moves the pointers and removes stale checkpoints."""
        directory = checkpoint_dir(self.job.work_dir, self.state.step)
        if self.main:
            directory.mkdir(parents=True, exist_ok=True)
        barrier()
        self.engine.save_state(directory)
        parts = self.gather_to_main(
            {
                "rng": rng_state(self.device),
                "callbacks": [callback.state_dict() for callback in self.callbacks],
            }
        )
        if self.main:
            self.update_best(directory.name, validated)
            trainer = {"state": asdict(self.state), "ranks": parts, "world_size": self.world_size}
            torch_save_atomic(trainer, directory / TRAINER_FILE)
        barrier()  # every rank's part is on disk
        if self.main:
            mark_complete(directory, self.manifest_info())
            point(self.job.work_dir, LATEST, directory)
            best_dir = directory.with_name(self.state.best_checkpoint or directory.name)
            point(self.job.work_dir, BEST, best_dir)
            if self.schedule.remove_stale_checkpoints:
                remove_stale(self.job.work_dir, {directory, best_dir})
        barrier()
        self.broadcast_best()

    def update_best(self, name: str, validated: bool) -> None:
        """The best checkpoint has the best validation metric among validated checkpoints;
        until one is validated, the most recent checkpoint counts as best (as in Tango)."""
        state = self.state
        if validated:
            assert state.val_metric is not None
            if self.schedule.better(state.val_metric, state.best_checkpoint_metric):
                state.best_checkpoint, state.best_checkpoint_metric = name, state.val_metric
        elif state.best_checkpoint_metric is None:
            state.best_checkpoint = name

    def broadcast_best(self) -> None:
        """Only rank 0 decides which checkpoint is best; the others learn it for their state."""
        if self.world_size == 1:
            return
        decided = [self.state.best_checkpoint, self.state.best_checkpoint_metric]
        dist.broadcast_object_list(decided, src=0)
        self.state.best_checkpoint, self.state.best_checkpoint_metric = decided

    def manifest_info(self) -> dict[str, Any]:
        return {
            "step": self.state.step,
            "world_size": self.world_size,
            "engine": type(self.engine).__name__,
            "format": getattr(self.engine, "checkpoint_format", "full"),
            "step_id": self.job.step_id,
        }

    def gather_to_main(self, value: Any) -> list[Any] | None:
        if self.world_size == 1:
            return [value]
        gathered: list[Any] | None = [None] * self.world_size if self.main else None
        dist.gather_object(value, gathered, dst=0)
        return gathered

    def resume(self) -> None:
        """Loads the newest usable checkpoint: this step's own, else `resume_from`'s. A partial or
        damaged one is skipped with a warning naming the file; every rank takes the same one."""
        for directory in resumable_checkpoints(self.job):
            problem = problem_with(directory)
            trainer = None
            if problem is None:
                try:
                    payload = self.engine.read_state(directory)
                    trainer = load_file(directory / TRAINER_FILE)
                except CheckpointError as e:
                    problem = str(e)
            if not self.everyone_agrees(problem is None):
                if self.main:
                    logger.warning("Skipping checkpoint: %s", problem or "damaged on another rank")
                continue
            self.engine.apply_state(payload)
            self.restore_trainer(trainer)
            if self.main:
                logger.info("Resumed from %s at step %d", directory, self.state.step)
            return

    def everyone_agrees(self, ok: bool) -> bool:
        if self.world_size == 1:
            return ok
        flag = torch.tensor(1 if ok else 0, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def restore_trainer(self, trainer: dict[str, Any]) -> None:
        self.state = TrainerState(**trainer["state"])
        parts = trainer["ranks"]
        if self.rank < len(parts):
            restore_rng_state(parts[self.rank]["rng"], self.device)
        # Callbacks keep their own rank's state; a rank the checkpoint did not have takes rank 0's.
        mine = parts[self.rank] if self.rank < len(parts) else parts[0]
        for callback, state in zip(self.callbacks, mine["callbacks"], strict=False):
            callback.load_state_dict(state)
        self.engine.steps_taken = self.state.step


def resumable_checkpoints(job: TrainingJob) -> list[Path]:
    """The checkpoints a job would resume from, newest first: its own, or when it has none yet,
    those of `resume_from`."""
    own = complete_checkpoints(job.work_dir)
    if own or job.resume_from is None:
        return own
    return resume_candidates(job.resume_from)


def resume_candidates(source: Path) -> list[Path]:
    """Checkpoints to resume from in `source`: a step's work directory, its `checkpoints/`
    directory, or one checkpoint directory."""
    source = Path(source)
    if (source / "COMPLETE.json").is_file():
        return [source]
    if source.name == "checkpoints":
        source = source.parent
    return complete_checkpoints(source)
