"""Writing and resuming checkpoints from inside the training loop; every rank calls each method.

Every rank writes its part (the engine's state, or its shard of it); rank 0 gathers every rank's
random generators and callback state into `trainer.pt`, marks the directory complete only once
all parts are on disk, then moves the pointers and removes stale checkpoints. Resuming takes the
newest checkpoint that every rank can read and load: a partial or damaged one is skipped with a
warning naming the file (and the entry, inside an FSDP2 `.distcp` file), and all ranks skip it
together.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist

from ..checkpoints.base_identity import base_identity, base_problem
from ..checkpoints.discovery import complete_checkpoints, resumable_checkpoints
from ..checkpoints.layout import (
    BEST,
    COMPLETE,
    LATEST,
    TRAINER_FILE,
    CheckpointError,
    adopt,
    checkpoint_dir,
    checkpoints_root,
    point,
    remove_partial,
    remove_stale,
)
from ..checkpoints.manifest import mark_complete, problem_with, read_manifest
from ..checkpoints.state import load_file, restore_rng_state, rng_state
from ..checkpoints.weights import write_model_files
from ..console import announce
from ..distributed.exchange import broadcast_data, gather_data
from ..distributed.groups import barrier, distributed_position
from ..files import DiskFullError, disk_full, no_room, raise_unchained, torch_save_atomic
from .callback_states import restore_states, saved_states
from .job import Schedule, TrainerState, TrainingJob

logger = logging.getLogger(__name__)


class Checkpointer:
    """One worker's side of its job's checkpoints: the engine's state, the loop's state (`state`,
    shared with the loop) and the callbacks' state."""

    def __init__(
        self, job: TrainingJob, schedule: Schedule, engine: Any, callbacks: list, grpo: Any = None
    ):
        self.job, self.schedule = job, schedule
        self.engine, self.callbacks = engine, callbacks
        self.sampled = grpo  # GRPO's step (its generation batch, with μ > 1), or None
        self.rank, self.world_size = distributed_position()
        self.device = engine.device
        self.base: dict[str, Any] | None = None  # an adapter's base (rank 0), in each manifest

    @property
    def main(self) -> bool:
        return self.rank == 0

    def prepare(self) -> None:
        """Before training: what a crash left half-written goes (said, never silently); the
        model's files are written."""
        if self.main:
            for directory in remove_partial(self.job.work_dir):
                logger.warning("Removed incomplete checkpoint %s (no %s)", directory, COMPLETE)
            write_model_files(self.engine.model, self.job.work_dir)
            self.base = base_identity(self.engine.model)
        barrier()

    def save(self, state: TrainerState, validated: bool) -> None:
        directory = checkpoint_dir(self.job.work_dir, state.step)
        if self.main:
            directory.mkdir(parents=True, exist_ok=True)
        barrier()
        with removed_when_full(directory):
            self.engine.save_state(directory)
            parts = self.gather_to_main(
                {
                    "rng": rng_state(self.device),
                    "callbacks": saved_states(self.callbacks),
                    "sampled": {} if self.sampled is None else self.sampled.state_dict(),
                }
            )
            if self.main:
                self.update_best(state, directory.name, validated)
                trainer = {"state": asdict(state), "ranks": parts, "world_size": self.world_size}
                torch_save_atomic(trainer, directory / TRAINER_FILE)
            barrier()  # every rank's part is on disk
            if self.main:
                mark_complete(directory, self.manifest_info(state))
        if self.main:
            point(self.job.work_dir, LATEST, directory)
            best_dir = directory.with_name(state.best_checkpoint or directory.name)
            point(self.job.work_dir, BEST, best_dir)
            if self.schedule.remove_stale_checkpoints:
                kept = complete_checkpoints(self.job.work_dir)[
                    : self.schedule.keep_last_checkpoints
                ]
                remove_stale(self.job.work_dir, {*kept, directory, best_dir})
        barrier()
        self.broadcast_best(state)

    def update_best(self, state: TrainerState, name: str, validated: bool) -> None:
        """The best checkpoint has the best validation metric among validated checkpoints;
        until one is validated, the most recent checkpoint counts as best (as in Tango)."""
        if validated:
            assert state.val_metric is not None
            if self.schedule.better(state.val_metric, state.best_checkpoint_metric):
                state.best_checkpoint, state.best_checkpoint_metric = name, state.val_metric
        elif state.best_checkpoint_metric is None:
            state.best_checkpoint = name

    def broadcast_best(self, state: TrainerState) -> None:
        """Only rank 0 decides which checkpoint is best; the others learn it for their state."""
        if self.world_size == 1:
            return
        decided = [state.best_checkpoint, state.best_checkpoint_metric]
        state.best_checkpoint, state.best_checkpoint_metric = broadcast_data(
            decided, 0, self.device
        )

    def manifest_info(self, state: TrainerState) -> dict[str, Any]:
        info = {
            "step": state.step,
            "world_size": self.world_size,
            "engine": type(self.engine).__name__,
            "format": getattr(self.engine, "checkpoint_format", "full"),
            "step_id": self.job.step_id,
            **self.job.identity,  # its data and model, compared when a run would resume it
        }
        return info if self.base is None else {**info, "base": self.base}

    def check_base(self, directory: Path) -> None:
        """An adapter checkpoint resumes only onto the base it was trained on (rank 0 compares
        the manifest's record with this run's base; every rank stops together). Collective."""
        problem = None
        if self.main:
            problem = base_problem(directory, read_manifest(directory).get("base"), self.base)
        if self.world_size > 1:
            problem = broadcast_data(problem, 0, self.device)
        if problem is not None:
            raise CheckpointError(problem)

    def gather_to_main(self, value: Any) -> list[Any] | None:
        if self.world_size == 1:
            return [value]
        return gather_data(value, 0, self.device)

    def resume(self) -> TrainerState | None:
        """Loads the newest usable checkpoint: this job's own, else `resume_from`'s; returns the
        loop's state there, or None when there is nothing to resume. An explicit `resume_from`
        none of whose checkpoints can be used fails, naming each and why (training from step 0
        instead would be a different run under the same name)."""
        candidates = resumable_checkpoints(self.job.work_dir, self.job.resume_from)
        refused = []
        for directory in candidates:
            problem, trainer = self.loaded(directory)
            if problem is not None:
                refused.append(problem)
                if self.main:
                    logger.warning("Skipping checkpoint: %s", problem)
                continue
            state = self.restore(cast(dict[str, Any], trainer))  # loaded: read
            if self.main:
                announce(logger, "Resumed from %s at step %d", directory, state.step)
            if directory.parent != checkpoints_root(self.job.work_dir):
                self.adopt(directory, state)
            return state
        own = complete_checkpoints(self.job.work_dir)
        if self.job.resume_from is not None and not own:
            reasons = "; ".join(refused) or "no checkpoint there"
            raise CheckpointError(
                f"train.resume_from {self.job.resume_from}: nothing there can be resumed "
                f"({reasons})"
            )
        return None

    def loaded(self, directory: Path) -> tuple[str | None, dict[str, Any] | None]:
        """The checkpoint's state loaded into the engine, and its `trainer.pt`; or why it
        cannot be (every rank answers the same, decided together). Its files are read on each
        rank before any rank loads; the collective load reads the tensors (FSDP2's DCP), and
        an entry it cannot read fails on every rank at once: either way all ranks skip it."""
        # Rank 0 reads every file to check its content; the others check what they can see.
        problem = problem_with(directory, contents=self.main)
        trainer = None
        if problem is None:
            try:
                payload = self.engine.read_state(directory)
                trainer = load_file(directory / TRAINER_FILE)
            except CheckpointError as e:
                problem = str(e)
        if not self.everyone_agrees(problem is None):
            return problem or "damaged on another rank", None
        self.check_base(directory)
        try:
            self.engine.apply_state(payload)
        except CheckpointError as e:  # what it loaded so far, the next checkpoint overwrites
            problem = str(e)
        if not self.everyone_agrees(problem is None):
            return problem or "unreadable on another rank", None
        return None, trainer

    def adopt(self, directory: Path, state: TrainerState) -> None:
        """`resume_from`'s checkpoint, and the best one its run had (when it is whole), become
        this run's (:func:`~.layout.adopt`): its `best` names a checkpoint of its own (it named
        one only the other run had), and a run resumed at its last step has its result."""
        if self.main:
            adopted = adopt(self.job.work_dir, directory)
            best = state.best_checkpoint
            if best is not None and best != directory.name:
                if problem_with(directory.with_name(best), contents=False) is None:
                    adopt(self.job.work_dir, directory.with_name(best))
                else:  # gone from the other run: the next validations decide again
                    state.best_checkpoint, state.best_checkpoint_metric = None, None
            point(self.job.work_dir, LATEST, adopted)
            point(self.job.work_dir, BEST, adopted.with_name(state.best_checkpoint or adopted.name))
        barrier()
        self.broadcast_best(state)

    def everyone_agrees(self, ok: bool) -> bool:
        if self.world_size == 1:
            return ok
        flag = torch.tensor(1 if ok else 0, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def restore(self, trainer: dict[str, Any]) -> TrainerState:
        state = TrainerState(**trainer["state"])
        parts = trainer["ranks"]
        if self.rank < len(parts):
            restore_rng_state(parts[self.rank]["rng"], self.device)
        # Callbacks keep their own rank's state; a rank the checkpoint did not have takes rank 0's.
        mine = parts[self.rank] if self.rank < len(parts) else parts[0]
        restore_states(self.callbacks, mine["callbacks"])
        if self.sampled is not None and len(parts) == self.world_size:  # a rank's own batch
            self.sampled.load_state_dict(mine.get("sampled", {}))
        return state


@contextlib.contextmanager
def removed_when_full(directory: Path) -> Iterator[None]:
    """A checkpoint the disk has no room for is one line naming the file (or the directory,
    where the writer does not say which file), and is removed: without its manifest it would
    never be loaded, and removing it frees the room it took. The run resumes from its last
    complete checkpoint."""
    full = None
    try:
        yield
    except BaseException as e:  # torch.distributed.checkpoint's CheckpointException is one
        if not no_room(e, directory):
            raise
        shutil.rmtree(directory, ignore_errors=True)
        kept = f"checkpoint {directory.name} was incomplete and is removed"
        full = (
            DiskFullError(f"{e}; {kept}")
            if isinstance(e, DiskFullError)
            else disk_full(directory, kept)
        )
    if full is not None:
        raise_unchained(full)  # (the writer's error freed first: its open files with it)
