"""Checkpoints that survive a crash, and the weights in them.

A checkpoint is a directory, `checkpoints/stepNNNNNNNNN/`, that every rank writes its part of;
rank 0 adds `COMPLETE.json` (each file and its size) only after all parts are on disk, and only
then moves the `latest` pointer. A directory without the manifest, or whose files do not match
it, is never loaded: the previous checkpoint is used instead, with a warning naming the file.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from .errors import first_line, one_line_error
from .files import write_atomic, write_json_atomic


def tied_parameter_names(module: torch.nn.Module) -> set[str]:
    """State-dict names that share storage with an earlier name (e.g. GPT-2's lm_head/wte)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        pointer = tensor.data_ptr()
        if pointer in seen and tensor.numel() > 0:
            tied.add(name)
        else:
            seen.setdefault(pointer, name)
    return tied


def check_full_weights(model: torch.nn.Module, names: set[str], source: str) -> None:
    """Fails unless the state-dict `names` fit the model exactly.

    Only tied duplicates may be missing: they come back through the weight they share. (Tango
    loads final weights with `strict=False`, which would silently keep random weights.)
    """
    expected = set(model.state_dict())
    missing = expected - names - tied_parameter_names(model)
    unexpected = names - expected
    if missing or unexpected:
        raise RuntimeError(
            f"{source}: weights do not fit the model "
            f"(missing: {sorted(missing)[:5]}, unexpected: {sorted(unexpected)[:5]})"
        )


# --- Checkpoint directories: complete-marked, verified, pointed to only when whole -------------

CHECKPOINTS = "checkpoints"
COMPLETE = "COMPLETE.json"
LATEST = "latest"
BEST = "best"
TRAINER_FILE = "trainer.pt"
MODEL_FILE = "model.pt"
DCP_MODEL_DIR = "dcp_model"


@one_line_error
class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file."""


def checkpoints_root(work_dir: Path) -> Path:
    return Path(work_dir) / CHECKPOINTS


def checkpoint_dir(work_dir: Path, step: int) -> Path:
    """Where the checkpoint after `step` training steps lives."""
    return checkpoints_root(work_dir) / f"step{step:09d}"


def checkpoint_step(directory: Path) -> int:
    match = re.fullmatch(r"step(\d+)", Path(directory).name)
    if match is None:
        raise CheckpointError(f"{directory}: not a checkpoint directory (stepNNNNNNNNN)")
    return int(match.group(1))


def mark_complete(directory: Path, info: dict) -> None:
    """Rank 0, after every rank has written its part: the manifest (each file and its size)
    goes in last, so a directory without it is never loaded."""
    directory = Path(directory)
    files = {
        str(path.relative_to(directory)): path.stat().st_size
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != COMPLETE and not path.name.endswith(".tmp")
    }
    write_json_atomic(directory / COMPLETE, {**info, "files": files})


def read_manifest(directory: Path) -> dict:
    path = Path(directory) / COMPLETE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({first_line(e)})") from None


def problem_with(directory: Path) -> str | None:
    """Why the checkpoint cannot be used (naming the file), or None if it is whole."""
    directory = Path(directory)
    if not (directory / COMPLETE).is_file():
        return f"{directory}: incomplete (no {COMPLETE}; the run stopped while writing it)"
    try:
        manifest = read_manifest(directory)
    except CheckpointError as e:
        return str(e)
    for name, size in manifest["files"].items():
        path = directory / name
        if not path.is_file():
            return f"{path}: missing"
        if path.stat().st_size != size:
            return f"{path}: {path.stat().st_size} bytes, {size} expected (truncated or changed)"
    return None


def complete_checkpoints(work_dir: Path) -> list[Path]:
    """Checkpoint directories that have a manifest, newest first (not yet verified)."""
    root = checkpoints_root(work_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step*") if p.is_dir() and (p / COMPLETE).is_file()]
    return sorted(found, key=checkpoint_step, reverse=True)


def point(work_dir: Path, name: str, directory: Path) -> None:
    """Moves the `latest` or `best` pointer (a file naming the directory) in one rename."""
    root = checkpoints_root(work_dir)
    write_atomic(root / name, lambda p: p.write_text(Path(directory).name + "\n"))


def pointed(work_dir: Path, name: str) -> Path | None:
    path = checkpoints_root(work_dir) / name
    if not path.is_file():
        return None
    return checkpoints_root(work_dir) / path.read_text().strip()


def remove_stale(work_dir: Path, keep: set[Path]) -> None:
    """Deletes every checkpoint directory but `keep` (rank 0, once the new one is complete)."""
    keep = {Path(p).resolve() for p in keep}
    for directory in checkpoints_root(work_dir).glob("step*"):
        if directory.resolve() not in keep:
            shutil.rmtree(directory, ignore_errors=True)


def remove_partial(work_dir: Path) -> None:
    """Before training (rank 0): checkpoints a crash left half-written, and temporary files."""
    root = checkpoints_root(work_dir)
    if not root.is_dir():
        return
    for directory in root.glob("step*"):
        if directory.is_dir() and not (directory / COMPLETE).is_file():
            shutil.rmtree(directory, ignore_errors=True)
    for temporary in root.rglob("*.tmp"):
        temporary.unlink(missing_ok=True)


# --- Random number generators: every one that training draws from, per rank -------------------


def rng_state(device: torch.device) -> dict[str, Any]:
    """Python's, NumPy's, torch's CPU generator and the worker's CUDA generator."""
    import numpy as np

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict[str, Any], device: torch.device) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


# --- Full weights out of any checkpoint ---------------------------------------------------------


def best_checkpoint(work_dir: Path) -> Path:
    """A finished run's result: its best checkpoint (the latest, when none was validated)."""
    best = pointed(work_dir, BEST) or pointed(work_dir, LATEST)
    if best is None:
        raise CheckpointError(f"{work_dir}: training ended without a checkpoint")
    return best


def full_model_state(directory: Path) -> dict[str, torch.Tensor]:
    """The whole model's state dict from a checkpoint of any engine, on the CPU.

    Engines that consolidate at save time wrote `model.pt`; FSDP2 wrote a sharded
    torch.distributed.checkpoint directory, read here without a process group.
    """
    directory = Path(directory)
    if (directory / MODEL_FILE).is_file():
        return load_file(directory / MODEL_FILE)
    if (directory / DCP_MODEL_DIR).is_dir():
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as scratch:
            target = Path(scratch) / "model.pt"
            dcp_to_torch_save(directory / DCP_MODEL_DIR, target)
            state = torch.load(target, map_location="cpu", weights_only=True)
        return state.get("model", state)
    raise CheckpointError(f"{directory}: no model weights ({MODEL_FILE} or {DCP_MODEL_DIR}/)")


def load_file(path: Path, map_location: str | torch.device = "cpu") -> Any:
    """`torch.load` of a checkpoint file; a damaged file is a CheckpointError naming it."""
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except (OSError, RuntimeError, EOFError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot be read ({first_line(e)})") from None
