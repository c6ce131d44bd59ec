"""Where everything of a checkpoint lives: the names of its files, its directory, and the
`latest` and `best` pointers. The only place that spells a checkpoint file's name.

    <work dir>/checkpoints/
        step000000400/            one checkpoint: every rank's part, then COMPLETE.json
            model.pt  optimizer.pt  lr_scheduler.pt  grad_scaler.pt     (consolidated engines)
            dcp_model/  dcp_optimizer/                                  (FSDP2: sharded DCP)
            trainer.pt                                                  (loop state, all ranks)
            COMPLETE.json                                               (the manifest, last)
        latest  best              pointer files naming a checkpoint directory
        model_files/              the model's config, tokenizer and catwalk_model.json
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ..errors import one_line_error
from ..files import write_atomic

CHECKPOINTS = "checkpoints"
COMPLETE = "COMPLETE.json"
LATEST = "latest"
BEST = "best"
TRAINER_FILE = "trainer.pt"
MODEL_FILE = "model.pt"
OPTIMIZER_FILE = "optimizer.pt"
LR_SCHEDULER_FILE = "lr_scheduler.pt"
GRAD_SCALER_FILE = "grad_scaler.pt"
DCP_MODEL_DIR = "dcp_model"
DCP_OPTIMIZER_DIR = "dcp_optimizer"
MODEL_FILES = "model_files"  # beside the checkpoints: what rebuilds the model without the hub
RUN_CARD_FILE = "run_card.json"  # in the work directory, written by `catwalk::train`
MODEL_INFO = "catwalk_model.json"  # in model_files/ and in every exported model directory
ADOPTING = ".adopting-"  # a checkpoint of another run being linked into this one


@one_line_error
class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file."""


def checkpoints_root(work_dir: Path) -> Path:
    return Path(work_dir) / CHECKPOINTS


def checkpoint_dir(work_dir: Path, step: int) -> Path:
    """Where the checkpoint after `step` training steps lives."""
    return checkpoints_root(work_dir) / f"step{step:09d}"


def is_checkpoint_dir(path: Path) -> bool:
    return re.fullmatch(r"step\d+", Path(path).name) is not None


def checkpoint_step(directory: Path) -> int:
    match = re.fullmatch(r"step(\d+)", Path(directory).name)
    if match is None:
        raise CheckpointError(f"{directory}: not a checkpoint directory (stepNNNNNNNNN)")
    return int(match.group(1))


def point(work_dir: Path, name: str, directory: Path) -> None:
    """Moves the `latest` or `best` pointer (a file naming the directory) in one rename."""
    root = checkpoints_root(work_dir)
    write_atomic(root / name, lambda p: p.write_text(Path(directory).name + "\n"))


def pointed(work_dir: Path, name: str) -> Path | None:
    path = checkpoints_root(work_dir) / name
    if not path.is_file():
        return None
    return checkpoints_root(work_dir) / path.read_text().strip()


def followed(path: Path) -> Path:
    """A path a user gives for a checkpoint, with a `latest` or `best` pointer file followed to
    the checkpoint it names (beside it); any other path as it is."""
    path = Path(path)
    if path.name not in (LATEST, BEST) or not path.is_file():
        return path
    named = path.read_text(errors="replace").strip()
    if not is_checkpoint_dir(Path(named)) or Path(named).name != named:
        raise CheckpointError(f"{path}: a pointer naming {named[:60]!r}, not a checkpoint")
    return path.parent / named


def remove_stale(work_dir: Path, keep: set[Path]) -> None:
    """Deletes every checkpoint directory but `keep` (rank 0, once the new one is complete)."""
    keep = {Path(p).resolve() for p in keep}
    for directory in checkpoints_root(work_dir).glob("step*"):
        if directory.resolve() not in keep:
            shutil.rmtree(directory, ignore_errors=True)


def adopt(work_dir: Path, checkpoint: Path) -> Path:
    """Another run's checkpoint (`resume_from`) made one of this run's, so that its `latest` and
    `best` always name directories it has: the files hard-linked (copied where a link cannot be
    made) into a temporary directory, then renamed whole. A crash in between leaves only the
    temporary directory, which :func:`remove_partial` clears."""
    root = checkpoints_root(work_dir)
    target = root / Path(checkpoint).name
    if target.exists():
        return target
    temporary = root / f"{ADOPTING}{target.name}"
    shutil.rmtree(temporary, ignore_errors=True)
    shutil.copytree(checkpoint, temporary, copy_function=link_or_copy)
    os.replace(temporary, target)
    return target


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or links not allowed
        shutil.copy2(source, target)


def remove_partial(work_dir: Path) -> list[Path]:
    """Before training (rank 0): checkpoints a crash left half-written, and temporary files.
    Returns the checkpoint directories removed."""
    root = checkpoints_root(work_dir)
    if not root.is_dir():
        return []
    removed = []
    for directory in sorted(root.glob("step*")):
        if directory.is_dir() and not (directory / COMPLETE).is_file():
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    for temporary in root.rglob("*.tmp"):
        temporary.unlink(missing_ok=True)
    for adopting in root.glob(f"{ADOPTING}*"):
        shutil.rmtree(adopting, ignore_errors=True)
    return removed
