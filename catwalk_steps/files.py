"""Writing files so that a reader (or a crash) never sees half of one."""

from __future__ import annotations

import json
import os
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
