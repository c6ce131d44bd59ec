"""Which checkpoints of a run to evaluate, in which order, and what each one's content is.

A checkpoint's evaluation is identified by the content of the weights it scores, never by its
path or its run: the SHA-256 of each weight file as the checkpoint's manifest lists it
(`model.pt`, or FSDP2's `dcp_model/`), the model's shape recorded there, and the model files
beside the checkpoints (config, tokenizer, `catwalk_model.json`). All of it is read without
loading a weight. So the same checkpoint seen from two runs (a run trained further with
`resume_from`: the checkpoint it resumed from is linked into its directory, and the ones before
it are the earlier run's) is scored once, and a directory trained again scores its new
weights, whatever its path.

For `model.pt` the hash is of the tensors it holds (the manifest's `tensors`): `torch.save`
writes a random serialization id and the name of its temporary file into every file, so the
same tensors saved twice (a run trained again from step 0, bit for bit, as on CPU in float32)
differ as files; their scores are reused. Elsewhere (FSDP2's `dcp_model/`, a manifest written
before `tensors` was recorded) the hash is the file's: never a stale score, at worst one
computed again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .discovery import complete_checkpoints
from .layout import (
    DCP_MODEL_DIR,
    MODEL_FILE,
    MODEL_FILES,
    CheckpointError,
    checkpoint_step,
    is_checkpoint_dir,
)
from .manifest import read_manifest, saved_tensors_digest, sha256_of


def run_checkpoints(work_dir: Path) -> dict[int, Path]:
    """A run's complete checkpoints (with a manifest) by training step, oldest first."""
    found = {checkpoint_step(c): c for c in complete_checkpoints(Path(work_dir))}
    return dict(sorted(found.items()))


def lineage_checkpoints(work_dir: Path, resumed_from: Path | None = None) -> dict[int, Path]:
    """A run's complete checkpoints by step, and before its first one those of the run it
    resumed from (`resume_from`: a work directory, or one checkpoint directory and those
    before it), so that a run trained further has the whole curve."""
    own = run_checkpoints(work_dir)
    if resumed_from is None or not Path(resumed_from).exists():
        return own
    earlier_dir = Path(resumed_from)
    limit = None
    if is_checkpoint_dir(earlier_dir):
        earlier_dir, limit = earlier_dir.parent.parent, checkpoint_step(earlier_dir)
    elif earlier_dir.name == "checkpoints":
        earlier_dir = earlier_dir.parent
    first = min(own, default=None)
    earlier = {
        step: path
        for step, path in run_checkpoints(earlier_dir).items()
        if (first is None or step < first) and (limit is None or step <= limit)
    }
    return dict(sorted({**earlier, **own}.items()))


def weights_content(checkpoint: Path) -> dict[str, Any]:
    """What a checkpoint's scores depend on, as data: its weight files' SHA-256 (from its
    manifest), its model's shape, and its model files' SHA-256 (small files, hashed here)."""
    checkpoint = Path(checkpoint)
    manifest = read_manifest(checkpoint)
    weights = {
        name: entry.get("tensors") or entry.get("sha256")
        for name, entry in sorted(manifest["files"].items())
        if is_weight_file(name) and isinstance(entry, dict)
    }
    if not weights:
        raise CheckpointError(f"{checkpoint}: its manifest lists no weight file")
    files = checkpoint.parent / MODEL_FILES
    model_files = {
        str(path.relative_to(files)): sha256_of(path)
        for path in sorted(files.rglob("*"))
        if path.is_file()
    }
    return {"weights": weights, "model": manifest.get("model"), "model_files": model_files}


def tensors_problem(checkpoint: Path) -> str | None:
    """Why `model.pt` does not hold the tensors its manifest's digest says (the digest is the
    identity its scores are cached under), or None. Read when a checkpoint is scored."""
    entry = read_manifest(checkpoint)["files"].get(MODEL_FILE)
    if not isinstance(entry, dict) or "tensors" not in entry:
        return None
    if saved_tensors_digest(Path(checkpoint) / MODEL_FILE) != entry["tensors"]:
        return f"{Path(checkpoint) / MODEL_FILE}: its tensors differ from its manifest's digest"
    return None


def is_weight_file(name: str) -> bool:
    return name == MODEL_FILE or name.startswith(f"{DCP_MODEL_DIR}/")


def chosen_steps(
    available: Sequence[int],
    every: int | None = None,
    last: int | None = None,
    steps: Sequence[int] | None = None,
) -> list[int]:
    """The checkpoint steps chosen out of `available`: those whose step is a multiple of
    `every`, the `last` n, the `steps` listed (each must be there); any that one of them
    chooses (nothing given: all). Sorted."""
    available = sorted(available)
    if every is None and last is None and steps is None:
        return available
    chosen: set[int] = set()
    if every is not None:
        chosen |= {s for s in available if s % every == 0}
    if last is not None:
        chosen |= set(available[-last:] if last else [])
    chosen |= set(steps or [])
    return sorted(chosen)


def coarse_to_fine(steps: Sequence[int]) -> list[int]:
    """The steps in an order whose every prefix spans the run: the last, the first, then the
    midpoints of the widest gaps (by position), so that early results already draw the curve."""
    ordered = sorted(steps)
    if len(ordered) <= 2:
        return ordered[::-1]
    order = [len(ordered) - 1, 0]
    gaps = [(0, len(ordered) - 1)]
    while gaps:
        gaps.sort(key=lambda gap: (gap[0] - gap[1], gap[0]))  # widest first, then earliest
        low, high = gaps.pop(0)
        if high - low < 2:
            continue
        middle = (low + high) // 2
        order.append(middle)
        gaps += [(low, middle), (middle, high)]
    return [ordered[i] for i in order]
