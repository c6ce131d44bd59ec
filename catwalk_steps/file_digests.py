"""Each file's SHA-256, hashed once while the file stays the same, whichever process asks.

A result's identity includes the content of a local model directory it scored (the step's
unique id holds the directory's digest: :func:`catwalk_steps.checkpoints.base_identity.
directory_digest`). The step graph is built by `tango run`, again by each `--parallelism` slot
and on every node, and a model directory may hold gigabytes: each file's digest is kept in this
user's record (`$XDG_CACHE_HOME/catwalk_steps/file_digests.json`, by default under
`~/.cache`) and reused while the file is the one that was hashed: the same real path, device,
inode, size, and modification and change times to the nanosecond.

Why that is enough: writing a file, or replacing it by another, moves its change time (ctime),
which no user call can set back (`touch -d`, `cp -p` and `rsync -t` set the modification time
only); a replaced file is another inode. A file hashed within :data:`RACY_NS` of its last
change may change again within one tick of the file system's clock without its times moving:
its digest serves the process that hashed it, and is not recorded (git's "racily clean" rule).

The record is data (JSON) in a directory of this user's alone: made 0700, and read only while
it is owned by this user, not a link, and writable by nobody else; the file too (written 0600,
atomically). A record that is not JSON or not of this shape is ignored and written afresh; one
that is not this user's alone is never read (a digest planted there would make a changed file
look unchanged) and said once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .files import DiskFullError, write_atomic

RECORD = "file_digests.json"
VERSION = 1
RACY_NS = 2_000_000_000  # a file changed less than this before it was hashed: not recorded
HEX = re.compile(r"[0-9a-f]{64}")
CHUNK = 1 << 20

logger = logging.getLogger(__name__)
_known: dict[tuple[str, tuple[int, ...]], str] = {}  # this process's: (path, its stat) -> digest
_said: list[str] = []


def sha256_of(path: Path) -> str:
    """A file's SHA-256, read a chunk at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def record_directory() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "catwalk_steps"


def stat_key(info: os.stat_result) -> tuple[int, ...]:
    """What says the file is still the one hashed (see the module)."""
    return (
        info.st_dev,
        info.st_ino,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
    )


def file_digests(paths: Sequence[Path]) -> list[str]:
    """Each file's SHA-256, from this process's memory or the user's record while the file is
    unchanged, else hashed (and recorded, unless it changed moments ago: see the module)."""
    record: dict[str, Any] | None = None
    fresh: dict[str, dict[str, Any]] = {}
    digests = []
    for path in paths:
        real = os.path.realpath(path)
        key = stat_key(os.stat(real))
        digest = _known.get((real, key))
        if digest is None:
            record = read_record() if record is None else record
            entry = record.get(real)
            if entry is not None and tuple(entry["stat"]) == key:
                digest = entry["sha256"]
            else:
                digest, settled = hashed(real, key)
                if settled:
                    fresh[real] = {"stat": list(key), "sha256": digest}
            _known[(real, key)] = digest
        digests.append(digest)
    if fresh:
        write_record(fresh)
    return digests


def hashed(real: str, key: tuple[int, ...]) -> tuple[str, bool]:
    """The file's SHA-256, and whether it may be recorded: unchanged while it was read, and
    last changed long enough before."""
    digest = sha256_of(Path(real))
    after = os.stat(real)
    settled = stat_key(after) == key and time.time_ns() - after.st_ctime_ns > RACY_NS
    return digest, settled


def private(path: Path, kind: int) -> bool:
    """Whether `path` is this user's alone: of `kind` (not a link), owned by this user, and
    writable by nobody else."""
    try:
        info = path.lstat()
    except OSError:
        return False
    mine = info.st_uid == os.getuid()
    return stat.S_IFMT(info.st_mode) == kind and mine and not info.st_mode & 0o022


def usable_directory() -> Path | None:
    """The record's directory, made if needed; None (said once) when it is not this user's
    alone or cannot be made: every process then hashes the files again."""
    directory = record_directory()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        say_once(f"{directory}: cannot be made ({e.strerror or e})")
        return None
    if not private(directory, stat.S_IFDIR):
        say_once(f"{directory}: not a directory of this user's alone (0700)")
        return None
    return directory


def say_once(why: str) -> None:
    if not _said:
        _said.append(why)
        logger.warning(
            "%s; model files' digests are not kept there: each process hashes them again", why
        )


def read_record() -> dict[str, Any]:
    """`{real path: {stat, sha256}}` from the user's record; empty where there is none, or it
    is not this user's alone, or not a record (then it is written afresh)."""
    directory = usable_directory()
    path = None if directory is None else directory / RECORD
    if path is None or not path.exists():
        return {}
    if not private(path, stat.S_IFREG):
        say_once(f"{path}: not a file of this user's alone")
        return {}
    try:
        payload = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(payload, dict) or payload.get("version") != VERSION:
        return {}
    files = payload.get("files")
    return {k: v for k, v in files.items() if valid(v)} if isinstance(files, dict) else {}


def valid(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        return False
    key = entry.get("stat")
    whole = isinstance(key, list) and len(key) == 5 and all(type(n) is int for n in key)
    return whole and HEX.fullmatch(entry["sha256"]) is not None


def write_record(fresh: dict[str, dict[str, Any]]) -> None:
    """The record with `fresh` added, read again first (other processes add theirs) and
    without the files changed or gone since (it holds only files as they are)."""
    directory = usable_directory()
    if directory is None:
        return
    files = {**read_record(), **fresh}
    kept = {path: entry for path, entry in files.items() if still(path, entry)}
    text = json.dumps({"version": VERSION, "files": kept}, sort_keys=True)
    try:
        write_atomic(directory / RECORD, lambda p: write_private(p, text))
    except (OSError, DiskFullError) as e:  # a full or read-only disk: for this process only
        say_once(f"{directory / RECORD}: not written ({getattr(e, 'strerror', None) or e})")


def still(path: str, entry: dict[str, Any]) -> bool:
    try:
        return list(stat_key(os.stat(path))) == entry["stat"]
    except OSError:
        return False


def write_private(path: Path, text: str) -> None:
    """`text` to a new file that only this user may read and write."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as f:
        f.write(text)
