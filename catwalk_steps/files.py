"""Writing files so that a reader (or a crash) never sees half of one, and a full disk said in
one line naming the file (:class:`DiskFullError`), never a library's traceback: Python's
`OSError: [Errno 28]`, torch's `[enforce fail at inline_container.cc:672]` or `iostream error`
name neither the disk nor the path."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import chain, one_line_error

# Below this many free bytes, a write that failed failed for want of room (torch's zip writer
# and safetensors say only that the write failed).
NO_ROOM_BYTES = 1 << 20


@one_line_error
class DiskFullError(RuntimeError):
    """A write that the disk had no room for; the message names the file and what was kept."""


def free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem that holds `path` (its nearest existing ancestor)."""
    existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return None


def no_room(error: BaseException, path: Path) -> bool:
    """Whether `error`, raised while writing `path`, means its disk is full: ENOSPC or EDQUOT
    in its chain (or in a rank's failure that torch.distributed.checkpoint gathered), or a
    library's own failure to write while the disk has (almost) no room."""
    links = causes(error)
    if any(isinstance(e, DiskFullError) for e in links):
        return True
    if any(isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) for e in links):
        return True
    if not isinstance(error, (OSError, RuntimeError)) and not hasattr(error, "failures"):
        return False  # (a KeyboardInterrupt, a value torch cannot save: not the disk)
    free = free_bytes(path)
    return free is not None and free < NO_ROOM_BYTES


def causes(error: BaseException) -> list[BaseException]:
    """The error's chain, with the failures a `CheckpointException` of DCP holds per rank."""
    links = chain(error)
    for link in list(links):
        failures = getattr(link, "failures", None)
        if isinstance(failures, dict):
            for failure in failures.values():
                wrapped = failure[0] if isinstance(failure, tuple) else failure
                if isinstance(wrapped, BaseException):
                    links += chain(wrapped)
    return links


def disk_full(path: Path, kept: str) -> DiskFullError:
    """The one line for a write of `path` that found its disk full; `kept` says what became of
    what was written."""
    return DiskFullError(f"{path}: not written, the disk is full (no space left on it); {kept}")


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Calls `write(temporary)`, flushes it to disk, then renames it to `path` in one step."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    full = None
    try:
        write(temporary)
        with open(temporary, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except Exception as e:
        if isinstance(e, DiskFullError) or not no_room(e, path):
            raise
        full = disk_full(path, "nothing of it was kept")
    finally:
        temporary.unlink(missing_ok=True)
    if full is not None:
        raise_unchained(full)


def raise_unchained(error: BaseException) -> None:
    """Raises `error` outside the handler that made it, so that it does not hold the library's
    error as its context: that error's frames keep the half-written file open, and on a tmpfs
    its pages stay taken (the disk still full for the failure's own record) until it is freed.
    (Raised in a context manager's exit, where the body's error is still being handled, it
    is chained to that one, shown as the cause no more.)"""
    raise error from None


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
