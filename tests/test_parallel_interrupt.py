"""Ctrl-C of `tango run --parallelism 2` mid-sweep: as for a sequential run, each stopped step
says so in one line and `tango run` names the steps it stopped, with no wall of "Exception
ignored in atexit callback" (a slot interrupted again while it exited), and no process left."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .commands import error_lines
from .conftest import REPO, TANGO_ENV, tango_command
from .test_one_line_through_tango_run import descendants
from .test_parallel import slot_processes

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
SLOW_CELLS = REPO / "tests" / "fixtures" / "sweep_slow_cells.jsonnet"
PROGRESS = re.compile(r"^(Training|Validating|Scoring|Writing)\b|^\s*$")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def terminal_lines(text: str) -> list[str]:
    """The output's lines, progress bars left out."""
    lines = text.replace("\r", "\n").splitlines()
    return [line for line in lines if not PROGRESS.match(line)]


@pytest.mark.parametrize("to", ["parent", "group"])
def test_ctrl_c_mid_sweep_names_the_stopped_steps_in_a_short_tail(tmp_path, to):
    """`parent`: SIGINT to `tango run` alone (it stops its slots); `group`: to its process
    group, as a terminal's Ctrl-C sends it, and SIGTERM to the slots as they stop (the
    parent's, sent then at the latest: every slot has two)."""
    out = tmp_path / "out"
    argv = tango_command(SLOW_CELLS, tmp_path / "ws", "stopped", None, "--parallelism", "2")
    with open(out, "w") as stdout:
        run = subprocess.Popen(
            argv,
            cwd=REPO,
            env=TANGO_ENV,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    deadline = time.monotonic() + 180
    while out.read_text().count("Training on") < 2:
        assert run.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
        time.sleep(0.2)
    below = descendants(run.pid)
    slots = slot_processes(run.pid)
    (os.kill if to == "parent" else os.killpg)(run.pid, signal.SIGINT)
    if to == "group":  # and the parent's SIGTERM reaches the slots while they stop
        time.sleep(0.5)
        for slot in slots:
            with contextlib.suppress(ProcessLookupError):
                os.kill(slot, signal.SIGTERM)
    assert run.wait(60) != 0
    output = out.read_text()
    lines = terminal_lines(output)
    first = next(i for i, line in enumerate(lines) if "Stopped" in line)
    tail = lines[first:]
    assert len(tail) <= 8, "\n".join(tail)
    assert "Exception ignored" not in output and "Traceback" not in output, output[-4000:]
    assert all(len(line) < 400 for line in error_lines(output))
    summary = [line for line in tail if "interrupted: stopped" in line]
    assert len(summary) == 1, "\n".join(tail)
    assert "trained,seed=1" in summary[0] and "trained,seed=2" in summary[0]
    deadline = time.monotonic() + 20
    while any(map(alive, below)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in below if alive(pid)]
