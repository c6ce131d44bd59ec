"""Jobs that share one workspace, each held at a chosen moment of a step's life, for the tests of
:class:`catwalk_steps.workspace.SharedLocalWorkspace`.

A job is a process that does what `tango run` does for one step (builds the workspace,
registers a run, asks for the step's result) with hold points: at each named point it sets the
point's `reached` event and waits for its `release` event. The test decides who moves when;
nothing depends on timing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import Timeout
from tango import Step
from tango.format import JsonFormat

from catwalk_steps.workspace.shared import SharedLocalWorkspace

# The hold points of this process: name -> (reached, release). Set by `job` in each child.
_HOLDS: dict[str, tuple[Any, Any]] = {}
_FAIL = False


def hold(point: str) -> None:
    if point in _HOLDS:
        reached, release = _HOLDS.pop(point)
        reached.set()
        release.wait()


class HeldJsonFormat(JsonFormat):
    """Writes the result, then holds at "writing": the result is on disk, its cache metadata
    (what makes it a cached result) not yet."""

    def write(self, artifact, dir):
        super().write(artifact, dir)
        hold("writing")


@Step.register("test::shared_value")
class SharedValue(Step[dict]):
    """A step whose every computation is counted in `log` (one line each)."""

    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = HeldJsonFormat()

    def run(self, key: str, log: str) -> dict:  # type: ignore[override]
        hold("running")
        if _FAIL:
            raise RuntimeError("this job's step fails")
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return {"key": key, "value": len(key)}


class HeldWorkspace(SharedLocalWorkspace):
    """The workspace with hold points around its own steps."""

    QUIET_WAIT_S = 0.1

    def _acquire_step_lock(self, step, lock):
        hold("before_lock")
        super()._acquire_step_lock(step, lock)

    def _wait_for_step_lock(self, step, lock):
        hold("waiting")  # the lock is held by someone else; this job is about to wait
        super()._wait_for_step_lock(step, lock)

    def _begin(self, step):
        hold("locked")  # the step's lock is ours, its record not yet written
        return super()._begin(step)

    def _save_registered_run(self, name, all_steps):
        hold("registering")  # inside register_run, with the record lock held
        super()._save_registered_run(name, all_steps)


class SignallingRecordsLock:
    """Wraps the workspace's record lock: sets `waiting` when it finds the lock taken."""

    def __init__(self, lock, waiting):
        self.lock, self.waiting = lock, waiting

    def __enter__(self):
        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            self.waiting.set()
            self.lock.acquire()
        return self

    def __exit__(self, *exc):
        self.lock.release()


@dataclass
class Job:
    """What one job does, and where it reports."""

    workspace: str
    key: str
    log: str
    run_name: str
    holds: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    fail: bool = False
    records_waiting: Any = None  # an event: set when this job waits for the record lock


def shared_step(key: str, log: str) -> SharedValue:
    return SharedValue(step_name="value", key=key, log=log)


def job(spec: Job, results: Any) -> None:
    """A child process: the step's result (or the error) goes to `results`."""
    global _FAIL
    _HOLDS.update(spec.holds)
    _FAIL = spec.fail
    workspace = HeldWorkspace(spec.workspace)
    if spec.records_waiting is not None:
        workspace._records_lock = SignallingRecordsLock(
            workspace._records_lock, spec.records_waiting
        )
    step = shared_step(spec.key, spec.log)
    try:
        workspace.register_run([step], spec.run_name)
        results.put(("ok", step.result(workspace)))
    except Exception as e:
        results.put(("error", f"{type(e).__name__}: {e}"))


def computations(log: str) -> int:
    path = Path(log)
    return len(path.read_text().splitlines()) if path.exists() else 0


def cached_files(workspace: str, step: SharedValue) -> list[str]:
    directory = Path(workspace) / "cache" / step.unique_id
    return sorted(p.name for p in directory.iterdir() if p.name not in ("work", "lock"))


def read_result(workspace: str, step: SharedValue) -> dict:
    return json.loads((Path(workspace) / "cache" / step.unique_id / "data.json").read_text())
