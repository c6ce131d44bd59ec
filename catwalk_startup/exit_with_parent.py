"""Imported first by the fork server that training workers start from (`PRELOAD` in
catwalk_steps/launch/launcher.py): the server ends as soon as the process that started it is
gone, and removes that process's run directory (:mod:`catwalk_steps.run_temp`).

Python's fork server notices its parent's end only between requests, after its preload
(torch, transformers, Tango, this package: seconds, 17 s measured under load), so a `tango run`
killed outright left it running that long. Here a thread waits on a pidfd of the parent from
the server's first moment. It lives in this light package because importing anything under
`catwalk_steps` imports all of it first. Without the variable it does nothing.
"""

from __future__ import annotations

import os
import select
import shutil
import threading
import time
from pathlib import Path

PARENT_ENV = "CATWALK_FORKSERVER_PARENT"
RUN_PREFIX = "catwalk-run-"  # catwalk_steps.run_temp: `catwalk-run-<pid>-<random>`
RUN_ENV = "CATWALK_RUN_TMP"


def owner_pid(name: str) -> int | None:
    """The pid in a run directory's name."""
    pid = name[len(RUN_PREFIX) :].split("-", 1)[0] if name.startswith(RUN_PREFIX) else ""
    return int(pid) if pid.isdigit() else None


def wait_for_end(pid: int) -> None:
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd here: poll
        while os.getppid() == pid:
            time.sleep(0.5)
        return
    select.select([descriptor], [], [])


def exit_with(parent: int, run_dir: str | None) -> None:
    wait_for_end(parent)
    if run_dir and owner_pid(Path(run_dir).name) == parent:
        shutil.rmtree(run_dir, ignore_errors=True)
    os._exit(0)


_parent = os.environ.pop(PARENT_ENV, "")
if _parent.isdigit():
    threading.Thread(
        target=exit_with,
        args=(int(_parent), os.environ.get(RUN_ENV)),
        name="exit-with-parent",
        daemon=True,
    ).start()
