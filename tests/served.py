"""Small processes of the tests forked from the command server (tests/commands.py): each is a
process of its own, as the one it stands for is, without spending 4-8 s of CPU importing this
package first (six lease holders side by side did, and a worker watching its launcher).

- `tests.served:hold` (tests/test_parallel.py) leases simulated GPUs and holds them; arguments:
  total, count, name, hold_s, the JSONL file it appends its record to, and optionally a file it
  waits for before holding hold_s more.
- `tests.served:watch` (tests/test_loop.py) is a worker that dies with its launcher
  (`die_with`); argument: the launcher's pid.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from . import commands
from .conftest import REPO


def hold() -> None:
    from catwalk_steps.distributed.lease import leased

    total, count, name, hold_s, log = sys.argv[1:6]
    go = sys.argv[6] if len(sys.argv) > 6 else None
    names = tuple(f"simulated-gpu-{i}" for i in range(int(total)))
    with leased(int(count), names, name) as indices:
        start = time.monotonic()
        print("held", flush=True)
        while go and not os.path.exists(go):  # held until the test says go
            time.sleep(0.05)
        time.sleep(float(hold_s))
        end = time.monotonic()
    record = {"holder": name, "indices": indices, "start": start, "end": end}
    with open(log, "a") as file:
        file.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    os._exit(0)  # not the preloaded interpreter's shutdown: seconds of CPU, nothing tested


def watch() -> None:
    from catwalk_steps.launch.worker_process import die_with

    die_with(int(sys.argv[1]))
    print("watching", flush=True)
    time.sleep(60)


class Served:
    """A started `tests.served:<target>`: its pid, its output in `<output>.out` and `.err`."""

    def __init__(self, target: str, argv: list[str], env: dict, output: Path):
        self.out, self.err = output.with_suffix(".out"), output.with_suffix(".err")
        for path in (self.out, self.err):
            path.write_text("")
        self._process = commands.ServedProcess(
            f"tests.served:{target}",
            [target, *argv],
            env,
            str(REPO),
            str(self.out),
            str(self.err),
        )
        self.pid = self._process.pid

    def poll(self) -> int | None:
        self._process.join(0)
        return self._process.exitcode

    def wait(self, timeout: float) -> int:
        self._process.join(timeout)
        assert self._process.exitcode is not None, f"{self.pid} still runs"
        return self._process.exitcode

    def first_line(self, path: Path, timeout: float = 60) -> str:
        """The first line written to `path` (waited for)."""
        deadline = time.monotonic() + timeout
        while "\n" not in (text := path.read_text()):
            assert time.monotonic() < deadline and self.poll() is None, text
            time.sleep(0.05)
        return text.split("\n", 1)[0]
