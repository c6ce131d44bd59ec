"""A checkpoint is complete only when its manifest says so: `COMPLETE.json`, written by rank 0
after every rank's part is on disk, lists each file and its size. A directory without it, or
whose files do not match it, is never loaded."""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import first_line
from ...files import write_json_atomic
from .layout import COMPLETE, CheckpointError


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


def has_manifest(directory: Path) -> bool:
    return (Path(directory) / COMPLETE).is_file()


def read_manifest(directory: Path) -> dict:
    path = Path(directory) / COMPLETE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({first_line(e)})") from None


def problem_with(directory: Path) -> str | None:
    """Why the checkpoint cannot be used (naming the file), or None if it is whole."""
    directory = Path(directory)
    if not has_manifest(directory):
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
