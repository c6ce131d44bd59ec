"""Memory of a command as it runs: the peak resident set of its whole process tree, sampled, and
its own peak (`ru_maxrss`), with its wall time; for the benchmarks that run real commands."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from common import REPO


def tree_rss_kib(root: int) -> dict[int, int]:
    """Resident set (KiB) of `root` and every process below it."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss[int(entry.name)] = int(line.split()[1])
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    members, waiting = [], [root]
    while waiting:  # root, then everything below it
        pid = waiting.pop()
        members.append(pid)
        waiting.extend(children.get(pid, []))
    return {pid: rss.get(pid, 0) for pid in members}


def measure(command: list[str], env: dict | None = None) -> dict:
    """Runs `command` from the repository root: wall time, the process tree's sampled peak RSS,
    the command's own peak RSS, and its output's tail."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "2", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    peak = {"tree": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak["tree"] = max(peak["tree"], sum(tree_rss_kib(process.pid).values()))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = process.stdout.read().decode(errors="replace")  # type: ignore[union-attr]
    _, status, usage = os.wait4(process.pid, 0)
    done.set()
    sampler.join()
    wall = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{output[-4000:]}")
    return {
        "wall_s": wall,
        "tree_peak_mib": peak["tree"] / 1024,
        "own_peak_mib": usage.ru_maxrss / 1024,
        "output": output[-2000:],
    }
