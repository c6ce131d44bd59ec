"""Writing files so that a reader (or a crash) never sees half of one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Calls `write(temporary)`, flushes it to disk, then renames it to `path` in one step."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temporary)
        with open(temporary, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_json_atomic(path: Path, value: Any) -> None:
    write_atomic(path, lambda p: p.write_text(json.dumps(value, indent=2) + "\n"))


def torch_save_atomic(value: Any, path: Path) -> None:
    import torch

    write_atomic(path, lambda p: torch.save(value, p))


def unwritable(directory: Path) -> str | None:
    """Why `directory` could not be created and written, tried in its nearest existing ancestor
    with a directory made and removed at once (permission bits alone pass `/proc` for root);
    None when it could."""
    existing = Path(directory).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".catwalk-write-test-", dir=existing))
    except OSError as e:
        return f"nothing can be created in {existing} ({e.strerror or e})"
    return None
