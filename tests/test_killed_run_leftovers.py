"""`tango run` killed outright (SIGKILL): its fork server ends at once (it outlived `tango` by
up to 17 s, importing its preload), and nothing of the run is left in $TMPDIR (`pymp-*`,
`catwalk-rendezvous-*`, `catwalk-graph-*.jsonnet` were); what a run could not remove, the
next run removes: run directories of this user whose process is gone, and only those."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from catwalk_steps.run_temp import remove_stale

from .conftest import EXPERIMENTS, REPO, TANGO_ENV, TINY_DEMO, tango_command
from .test_one_line_through_tango_run import descendants
from .test_parallel_interrupt import alive

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
TWO_WORKERS = {**TINY_DEMO, "steps.trained.device_count": 2, "steps.trained.train_steps": 2000}


@pytest.fixture
def temp() -> Iterator[Path]:
    """A $TMPDIR of a short path (the fork server's socket is in it: AF_UNIX paths are short)."""
    directory = Path(tempfile.mkdtemp(prefix="cw-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def start(tmp_path: Path, temp: Path, name: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"{name}.out"
    argv = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", name, TWO_WORKERS, *extra)
    with open(out, "w") as stdout:
        run = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**TANGO_ENV, "TMPDIR": str(temp)},
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return run, out


def wait_for(run: subprocess.Popen, out: Path, marker: str) -> None:
    deadline = time.monotonic() + 180
    while marker not in out.read_text():
        assert run.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
        time.sleep(0.1)


def left(temp: Path) -> list[str]:
    """What a run left in $TMPDIR (torch's compile cache, `torchinductor_<user>`, is meant to
    stay)."""
    return sorted(p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_"))


def gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def test_a_killed_run_leaves_no_process_and_no_file(tmp_path, temp):
    """Killed while the fork server imports its preload (the data step done: the server was
    started at graph build); its pymp-* directory, with the server's socket, was left."""
    run, out = start(tmp_path, temp, "killed")
    wait_for(run, out, 'Starting step "trained"')
    below = descendants(run.pid)
    run.kill()
    run.wait()
    assert gone_within(below, 5) == []
    time.sleep(0.5)
    assert left(temp) == []


def test_the_next_run_removes_what_dead_runs_of_this_user_left(tmp_path):
    temp = tmp_path / "tmp"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = temp / f"catwalk-run-{dead.pid}-abc"
    (stale / "pymp-x").mkdir(parents=True)
    live = temp / f"catwalk-run-{os.getpid()}-abc"  # this test's process: alive
    live.mkdir()
    other = temp / "catwalk-run-x-abc"  # not a run directory's name
    other.mkdir()
    assert remove_stale(temp) == [stale]
    assert sorted(p.name for p in temp.iterdir()) == sorted([live.name, other.name])


def test_a_run_killed_under_parallelism_is_cleared_by_the_next(tmp_path, temp):
    run, out = start(tmp_path, temp, "killed", "--parallelism", "2")
    wait_for(run, out, "Training on 2")
    below = descendants(run.pid)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert gone_within(below, 15) == []
    again, out = start(tmp_path, temp, "again", "-s", "data")
    assert again.wait(300) == 0, out.read_text()[-3000:]
    assert left(temp) == []
