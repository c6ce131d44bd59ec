"""This node's GPUs leased to the steps running on it, so that steps side by side (`tango run
--parallelism N`, or two runs on one node) never share a device.

A step that needs devices takes `count` GPU indices before its workers start and holds them
until it ends: each index is a lock file in the node's lease directory, held with `flock`, so the
kernel releases it when the holding process ends in any way (finished, failed, SIGKILLed). The
indices are taken all at once under the directory's allocation lock (no two steps each holding
half of what they need); a step that finds too few free waits, saying once in the log what for.

The directory is the user's own (:func:`default_directory`, or `CATWALK_LEASE_DIR`): made 0700
and refused, in one line, when another user owns it or can write to it; `tango run` checks it
once before any step runs (:func:`catwalk_steps.parallel.sizing.check_lease_directory`). Sharing
GPUs between users is the cluster scheduler's business. The lock files hold the holder's pid and
step name as text, read only for the waiting line.

`CATWALK_SIMULATED_GPUS=N` gives CPU workers a lease from N simulated indices (the workers still
run on the CPU): how the lease is tested on a machine without GPUs. A step of more workers than N
is as a step of more workers than a node's GPUs: CPU processes that lease none, which it says
when it starts (:func:`.devices.cpu_note`), and `--parallelism`'s line counts it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from tango.common.exceptions import ConfigurationError

LEASE_DIR_ENV = "CATWALK_LEASE_DIR"
SIMULATED_ENV = "CATWALK_SIMULATED_GPUS"
POLL_S = 0.25
HOLDER_CHARS = 200

logger = logging.getLogger(__name__)


def simulated_gpus() -> int | None:
    """`CATWALK_SIMULATED_GPUS`, when set: the node's GPU count for leases on a CPU machine."""
    value = os.environ.get(SIMULATED_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigurationError(f"{SIMULATED_ENV}: a whole number >= 1, got {value!r}")
    return int(value)


def _private(directory: Path) -> bool:
    """Whether `directory` (followed if a link) is a directory of this user's that no one else
    may enter (0700)."""
    try:
        info = directory.stat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def default_directory() -> Path:
    """Where this user's leases of this node are kept, a place no other user can take first
    (the shared temp directory was one: whoever made `catwalk-devices-<uid>` there first, made
    every device step of that uid fail):

    - `$XDG_RUNTIME_DIR/catwalk-devices` when that is the user's own 0700 directory (per user
      and per node, on a tmpfs, which the login manager makes);
    - else `catwalk/devices-<host>` in the user's cache directory (`$XDG_CACHE_HOME`, or
      `~/.cache`): inside the home, which other users cannot write; the host is named because
      one home may serve several nodes, and a lease is of one node's GPUs.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and _private(Path(runtime)):
        return Path(runtime) / "catwalk-devices"
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache:
        try:
            cache = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no HOME, and no account to read it from
            raise ConfigurationError(
                f"no home directory to keep device leases in; set {LEASE_DIR_ENV} to a "
                "directory of your own"
            ) from None
    return Path(cache) / "catwalk" / f"devices-{socket.gethostname()}"


def lease_directory() -> Path:
    """The node's lease directory for this user, made if missing and checked (see the module);
    a link is followed, and the directory it leads to is checked and used."""
    configured = os.environ.get(LEASE_DIR_ENV)
    directory = Path(configured) if configured else default_directory()
    where = f"{LEASE_DIR_ENV}={directory}" if configured else str(directory)
    try:
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700, parents=True)
        real = Path(os.path.realpath(directory))
        info = real.lstat()
    except OSError as error:
        raise ConfigurationError(
            f"{where}: cannot make the device lease directory ({error.strerror}); set "
            f"{LEASE_DIR_ENV} to a directory of your own"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigurationError(f"{where}: the device lease directory is not a directory")
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ConfigurationError(
            f"{where}: the device lease directory belongs to another user or others can "
            f"write to it; remove it or set {LEASE_DIR_ENV} to a directory of your own"
        )
    return real


def _open_lock(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _write_holder(fd: int, holder: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {holder}"[:HOLDER_CHARS].encode(), 0)


class DeviceLease:
    """Indices of this node's GPUs held by this process until :meth:`release`."""

    def __init__(self, indices: tuple[int, ...], fds: list[int]):
        self.indices = indices
        self._fds = fds

    def release(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no holder named once it is free
            os.close(fd)  # closing releases the lock
        self._fds = []


def _lock_path(directory: Path, name: str) -> Path:
    return directory / f"{name}.lock"


def try_lease(
    directory: Path, count: int, names: tuple[str, ...], holder: str
) -> DeviceLease | None:
    """`count` of the devices `names` taken at once, or None (nothing held) when too few are
    free; the lease's indices are positions in `names`."""
    alloc = _open_lock(directory / "allocation.lock")
    try:
        fcntl.flock(alloc, fcntl.LOCK_EX)  # held only while taking
        taken: list[tuple[int, int]] = []
        for index, name in enumerate(names):
            fd = _open_lock(_lock_path(directory, name))
            if _try_lock(fd):
                taken.append((index, fd))
                if len(taken) == count:
                    break
            else:
                os.close(fd)
        if len(taken) < count:
            for _, fd in taken:
                os.close(fd)
            return None
        for _, fd in taken:
            _write_holder(fd, holder)
        return DeviceLease(tuple(i for i, _ in taken), [fd for _, fd in taken])
    finally:
        os.close(alloc)


def holders(directory: Path, names: tuple[str, ...]) -> list[str]:
    """Who holds the devices, as their lock files say (text; empty files are free)."""
    found = []
    for name in names:
        with contextlib.suppress(OSError):
            data = _lock_path(directory, name).read_bytes()[:HOLDER_CHARS]
            text = data.decode(errors="replace").strip()
            if text:
                found.append(f"{name} by pid {text}")
    return found


@contextlib.contextmanager
def leased(count: int, names: tuple[str, ...], holder: str) -> Iterator[tuple[int, ...]]:
    """Holds `count` of the devices `names` while the block runs, waiting until they are free;
    yields their positions in `names`."""
    if count > len(names):
        raise ConfigurationError(f"{holder}: needs {count} GPUs, this node has {len(names)}")
    directory = lease_directory()
    lease = try_lease(directory, count, names, holder)
    if lease is None:
        logger.warning(
            "%s waits for %d of this node's %d GPUs (held: %s)",
            holder,
            count,
            len(names),
            "; ".join(holders(directory, names)) or "by other steps",
        )
        while lease is None:
            time.sleep(POLL_S)
            lease = try_lease(directory, count, names, holder)
    try:
        yield lease.indices
    finally:
        lease.release()
