"""Which checkpoint a run resumes from, which one is its result, and which one a user means.

The rules: a job resumes from its own newest complete checkpoint, else (when it has none yet)
from `resume_from`'s; a checkpoint written by another engine, or trained on other data or
another model (:mod:`.run_identity`), is refused before any worker starts; the result is the
best checkpoint (the latest, when none was validated); a user names a checkpoint directory, a
step's work directory or its `checkpoints/` directory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tango.common.exceptions import ConfigurationError

from .layout import (
    BEST,
    LATEST,
    CheckpointError,
    checkpoint_step,
    checkpoints_root,
    followed,
    is_checkpoint_dir,
    pointed,
)
from .manifest import has_manifest, problem_with, read_manifest
from .run_identity import identity_problem

logger = logging.getLogger(__name__)


def complete_checkpoints(work_dir: Path) -> list[Path]:
    """Checkpoint directories that have a manifest, newest first (not yet verified)."""
    return [directory for directory in checkpoint_dirs(work_dir) if has_manifest(directory)]


def checkpoint_dirs(work_dir: Path) -> list[Path]:
    """Every checkpoint directory, complete or not, newest first."""
    root = checkpoints_root(work_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step*") if p.is_dir() and is_checkpoint_dir(p)]
    return sorted(found, key=checkpoint_step, reverse=True)


def resume_candidates(source: Path) -> list[Path]:
    """Checkpoints to resume from in `source` (a step's work directory, its `checkpoints/`
    directory, or one checkpoint directory or its `latest`/`best` pointer), newest first:
    incomplete ones too, so that skipping them is said."""
    source = followed(source)
    if has_manifest(source) or is_checkpoint_dir(source):
        return [source]
    if source.name == "checkpoints":
        source = source.parent
    return checkpoint_dirs(source)


def resumable_checkpoints(work_dir: Path, resume_from: Path | None) -> list[Path]:
    """The checkpoints a job would resume from, newest first: its own, or when it has none yet,
    those of `resume_from`."""
    own = complete_checkpoints(work_dir)
    if own or resume_from is None:
        return own
    return resume_candidates(resume_from)


def check_resumable(
    work_dir: Path,
    resume_from: Path | None,
    engine: str,
    world_size: int,
    identity: dict[str, Any] | None = None,
) -> None:
    """Before any worker starts: the checkpoint this job would resume from (its own, else
    `resume_from`'s) is one it can load (:func:`check_resumed`; any world size)."""
    resumed = resumed_checkpoint(resumable_checkpoints(work_dir, resume_from), resume_from)
    if resumed is None:
        return
    checkpoint, manifest = resumed
    check_resumed(checkpoint, manifest, identity or {}, engine=engine)
    if manifest.get("world_size") != world_size:
        logger.info(
            "Resuming a %s-process checkpoint on %d processes",
            manifest.get("world_size"),
            world_size,
        )


def resumed_checkpoint(
    candidates: list[Path], resume_from: Any
) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint of `candidates` and its manifest (a damaged one: a
    CheckpointError naming it); None when there is none, one line when `resume_from` asked for
    one."""
    complete = [candidate for candidate in candidates if has_manifest(candidate)]
    if not complete:
        if resume_from is not None:
            raise ConfigurationError(missing_resume_from(resume_from))
        return None
    return complete[0], read_manifest(complete[0])


def check_resumed(
    checkpoint: Path,
    manifest: dict[str, Any],
    identity: dict[str, Any],
    engine: str | None = None,
    field: str | None = None,
) -> None:
    """The one rule of resuming, at graph build and again before any worker starts: a
    checkpoint resumes with the engine class that wrote it (`engine`, where it is known) and
    in the run it was trained for (`identity`: its data and model, :mod:`.run_identity`). One
    line otherwise, led by `field` where it is given."""
    written_by = manifest.get("engine")
    if engine is not None and written_by is not None and written_by != engine:
        raise ConfigurationError(
            f"{checkpoint}: written by {written_by}, but this run trains with {engine}; "
            "checkpoints resume with the engine that wrote them (export it with "
            "catwalk::export_checkpoint and start from the weights instead)"
        )
    problem = identity_problem(checkpoint, manifest, identity)
    if problem is not None:
        raise ConfigurationError(problem if field is None else f"{field}: {problem}")


def missing_resume_from(resume_from: Any) -> str:
    """Why `resume_from` names nothing to resume: the path does not exist, or holds no
    complete checkpoint."""
    if isinstance(resume_from, (str, Path)) and not Path(resume_from).exists():
        return f"train.resume_from: {resume_from} does not exist"
    return f"train.resume_from: no complete checkpoint in {resume_from}"


def best_checkpoint(work_dir: Path) -> Path:
    """A finished run's result: its best checkpoint (the latest, when none was validated)."""
    best = pointed(work_dir, BEST) or pointed(work_dir, LATEST)
    if best is None:
        raise CheckpointError(f"{work_dir}: training ended without a checkpoint")
    return best


def latest_checkpoint(work_dir: Path) -> Path:
    latest = pointed(work_dir, LATEST)
    if latest is None:
        raise CheckpointError(f"{work_dir}: training ended without a checkpoint")
    return latest


def resolve_checkpoint(path: Path) -> Path:
    """A usable checkpoint directory from what the user names (a checkpoint, the `latest` or
    `best` pointer naming one); the latest whole one of a work directory."""
    path = followed(path)
    if has_manifest(path) or is_checkpoint_dir(path):
        problem = problem_with(path)
        if problem:
            raise CheckpointError(problem)
        return path
    work_dir = path.parent if path.name == "checkpoints" else path
    latest = pointed(work_dir, LATEST)
    candidates = ([latest] if latest else []) + complete_checkpoints(work_dir)
    for candidate in candidates:
        if problem_with(candidate) is None:
            return candidate
    raise CheckpointError(
        f"{path}: no complete checkpoint (a step's work directory, or one of "
        "its checkpoints/stepNNNNNNNNN directories)"
    )
