"""One temporary directory per `tango run`, for the files its processes share only while it
runs: the step graph its `--parallelism` slots read, the rendezvous file its workers meet
through, multiprocessing's own directory (the fork server's socket) and the files torch names
for a failed worker's traceback (which it unpickles: out of other users' reach here).

Each of those was a name of its own in $TMPDIR (`catwalk-graph-*.jsonnet`,
`catwalk-rendezvous-*`, `pymp-*`), removed by the process that made it as it exits: a `tango run`
killed outright (SIGKILL, out of memory) left them behind. Now they are made inside
`$TMPDIR/catwalk-run-<pid>-*` (0700, this user's), which the process that made it removes as it
exits, the fork server removes once that process is gone (:mod:`catwalk_startup.exit_with_parent`),
and the next run removes if its process is gone and nobody else did: only directories of this
name owned by this user.
"""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

# RUN_ENV is inherited: a run's slots and workers use their run's directory.
from catwalk_startup.exit_with_parent import RUN_ENV, RUN_PREFIX, owner_pid


def run_temp_dir() -> Path:
    """This run's directory (made on first use, by the run's first process that needs it)."""
    inherited = os.environ.get(RUN_ENV)
    if inherited and Path(inherited).is_dir():
        return Path(inherited)
    remove_stale()
    path = Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{os.getpid()}-"))
    os.environ[RUN_ENV] = str(path)
    # After multiprocessing's own removal of its pymp-* directory inside (priority -100): an
    # atexit function would run first and make that one fail with a traceback.
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(str(path), True), exitpriority=-101)
    return path


def remove_stale(directory: Path | None = None) -> list[Path]:
    """The run directories of this user whose process is gone, removed; returns them."""
    removed = []
    for path in Path(directory or tempfile.gettempdir()).glob(f"{RUN_PREFIX}*"):
        pid = owner_pid(path.name)
        try:
            info = path.lstat()
        except OSError:
            continue
        if pid is None or info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
            continue
        if not alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


@contextlib.contextmanager
def temp_files_in_run_dir() -> Iterator[None]:
    """`tempfile`'s default directory is the run's while inside (for what names none itself,
    such as multiprocessing's `pymp-*` directory)."""
    before = tempfile.tempdir
    tempfile.tempdir = str(run_temp_dir())
    try:
        yield
    finally:
        tempfile.tempdir = before
