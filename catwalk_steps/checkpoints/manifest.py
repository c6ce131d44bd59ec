"""A checkpoint is complete only when its manifest says so, and whole only when every file still
matches it: `COMPLETE.json`, written by rank 0 after every rank's part is on disk, lists each
file with its size and SHA-256. A directory without it, or with a file that is missing, of
another size or of other content, is never loaded.

Checking content, not just sizes, matters twice: a file damaged in place (a bad sector, a copy
that wrote zeros) keeps its size; and one part of an FSDP2 checkpoint (torch.distributed.
checkpoint's `.metadata`) is a pickle, which may only be read once the manifest vouches for it.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from ..errors import first_line
from ..file_digests import sha256_of
from ..files import write_json_atomic
from .layout import COMPLETE, MODEL_FILE, CheckpointError

CHUNK = 1 << 20
SERIALIZATION_ID = ".data/serialization_id"  # random, written by every torch.save


def saved_tensors_digest(path: Path) -> str | None:
    """SHA-256 of what a `torch.save` file holds, leaving out what two saves of the same
    tensors differ in: the random serialization id and the archive's folder name (the name of
    the temporary file it was written to). None for a file that is not such an archive. What
    identifies a checkpoint's weights (:mod:`.content`): a run trained again bit for bit has
    the same digests, and other files."""
    if not zipfile.is_zipfile(path):
        return None
    digest = hashlib.sha256()
    with zipfile.ZipFile(path) as archive:
        for name, entry in sorted((e.filename.split("/", 1)[-1], e) for e in archive.infolist()):
            if name == SERIALIZATION_ID:
                continue
            digest.update(f"{name}\0{entry.file_size}\0".encode())
            with archive.open(entry) as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: Path) -> dict:
    """A file's manifest entry: its size and SHA-256; for the model's weights, also the digest
    of the tensors it holds (`tensors`)."""
    entry = {"size": path.stat().st_size, "sha256": sha256_of(path)}
    tensors = saved_tensors_digest(path) if path.name == MODEL_FILE else None
    return entry if tensors is None else {**entry, "tensors": tensors}


def mark_complete(directory: Path, info: dict) -> None:
    """Rank 0, after every rank has written its part: the manifest (each file, its size and its
    SHA-256) goes in last, so a directory without it is never loaded."""
    directory = Path(directory)
    files = {
        str(path.relative_to(directory)): file_entry(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != COMPLETE and not path.name.endswith(".tmp")
    }
    write_json_atomic(directory / COMPLETE, {**info, "files": files})


def has_manifest(directory: Path) -> bool:
    return (Path(directory) / COMPLETE).is_file()


def read_manifest(directory: Path) -> dict:
    path = Path(directory) / COMPLETE
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({first_line(e)})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{path}: not a checkpoint manifest (no 'files')")
    return manifest


def problem_with(directory: Path, contents: bool = True) -> str | None:
    """Why the checkpoint cannot be used (naming the file), or None if it is whole.

    :param contents: also compare every file's SHA-256 (reads the whole checkpoint); without
        it, only presence and sizes (for a rank that leaves the reading to another).
    """
    directory = Path(directory)
    if not has_manifest(directory):
        return f"{directory}: incomplete (no {COMPLETE}; the run stopped while writing it)"
    try:
        manifest = read_manifest(directory)
    except CheckpointError as e:
        return str(e)
    for name, expected in manifest["files"].items():
        path = directory / name
        if not isinstance(expected, dict) or "sha256" not in expected:
            return f"{path}: no checksum in {COMPLETE} (written by an older catwalk_steps)"
        if not path.is_file():
            return f"{path}: missing"
        size = path.stat().st_size
        if size != expected["size"]:
            return f"{path}: {size} bytes, {expected['size']} expected (truncated or changed)"
        if contents and sha256_of(path) != expected["sha256"]:
            return f"{path}: its content changed since it was written (SHA-256 differs)"
    return None
