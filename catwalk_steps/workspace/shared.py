"""The Tango workspace: a directory we must be able to write, and that several jobs may share.

(Cached results that cannot be read: :mod:`.step_cache`; clearing one: `catwalk-clear-step`;
the records as data: :mod:`.records`.)

Tango 1.3.2 judged who computes a step by its record too, read outside the step's lock, and
failed in the gaps: a job that found the lock held before the holder had written "running"
stopped with "marked as being incomplete, but ... can only be one of {running}"; a probe of the
lock by one job made another's look-up see "running"; records were read, changed and written
back by whoever looked (a run being registered could undo another job's "running"); two jobs
racing to create `settings.json` or the `latest` link failed; a job killed while writing its
result left a record that stayed "running" for ever.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import tango.workspaces.local_workspace as tango_local_workspace
from filelock import Timeout
from tango import Step
from tango.common import PathOrStr
from tango.common.exceptions import ConfigurationError, StepStateError
from tango.common.file_lock import FileLock
from tango.common.util import exception_to_string, utc_now_datetime
from tango.step_info import StepInfo, StepState
from tango.workspace import Run, Workspace
from tango.workspaces import LocalWorkspace

from catwalk_startup.patching import check_tango, patch
from .directory import (
    check_path_name,
    check_writable,
    plain_name,
    remove_partial_result,
    write_settings_once,
)
from .records import StepRecords
from .step_cache import CheckedStepCache

logger = logging.getLogger(__name__)
T = TypeVar("T")


# --- A local workspace that several `tango run` jobs share ------------------------------------


# Tango 1.3.2's LocalWorkspace, read and extended here, private parts included (no public seam
# lets a workspace decide under a step's lock): `step_info_file` (the record database's path),
# `locks` (the step locks this process holds), `_step_lock_file` (where a step's lock lives) and
# `_fix_step_info` (its repair of a record read back). `check_tango` refuses another Tango, and
# tests/test_tango_compat.py fails when one of these is gone.
check_tango("SharedLocalWorkspace")
# Every record Tango's LocalWorkspace reads or writes, as data (:mod:`.records`).
patch(tango_local_workspace, "SqliteDict", "step records as JSON", lambda _: StepRecords)


@Workspace.register("catwalk::local")
class SharedLocalWorkspace(LocalWorkspace):
    """Tango's `LocalWorkspace` made safe for several `tango run` jobs at once on one directory
    (a SLURM job array, two terminals, machines sharing a filesystem with working `flock`).

    A step's lock is the only judge of who computes it, and a step's record is written only
    under that lock (what went wrong without: the module's docstring). Here:

    - `step_starting` takes the step's lock (waiting, with one log line, while another job
      holds it), then decides under the lock: a result already in the cache (computed by the
      job it waited for) is read, never computed again; otherwise what a failed or killed job
      left (a partial result, a stale "running" record) is cleared and the step runs here.
    - `step_finished` and `step_failed` write the result and the record before the lock goes.
    - Every read-change-write of the record database, and the registration of a run (its
      records, the `latest` link), holds one workspace-wide lock (`stepinfo.lock`) for the
      milliseconds it takes; a look-up never fails because of the lock's state, and resets a
      record that says "running" only when it can take the step's lock itself (its job died).

    Registered as `catwalk::local`; Tango's own name `local` is bound to it too
    (:mod:`catwalk_steps.tango_fixes.names`), so that `-w DIR`, `local://DIR` and
    `workspace: {type: local}` all get it once `catwalk_steps` is imported.
    """

    RECORDS_LOCK = "stepinfo.lock"
    QUIET_WAIT_S = 1.0  # a lock held this briefly is someone's look-up, not a running step

    def __init__(self, dir: PathOrStr):
        directory = Path(dir)
        check_writable(directory, "workspace")
        check_writable(directory / "cache", "workspace cache")
        write_settings_once(directory)
        super().__init__(directory)
        self.cache = CheckedStepCache(self.dir / "cache")  # damaged results: one line each
        self._records_lock = FileLock(self.dir / self.RECORDS_LOCK)

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_records_lock", None)  # a lock is this process's; the copy makes its own
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._records_lock = FileLock(self.dir / self.RECORDS_LOCK)

    @contextlib.contextmanager
    def _records(self) -> Iterator[StepRecords]:
        """The record database, alone: no other process reads-changes-writes it meanwhile."""
        with self._records_lock, StepRecords(self.step_info_file) as records:
            yield records
            records.commit()

    # --- Look-ups ------------------------------------------------------------------------------

    def step_info(self, step_or_unique_id: Step | str) -> StepInfo:
        with self._records() as records:
            info = step_record(records, step_or_unique_id)
            if info.state == StepState.RUNNING and self._abandoned(info.unique_id):
                info.start_time = None  # its job died: the step is incomplete again
                info.end_time = None
                records[info.unique_id] = info
        self._fix_step_info(info)
        return info

    def _fix_step_info(self, info: StepInfo) -> None:  # type: ignore[override]
        """Tango's repair of a record read back, and where the step's result is: its own
        directory, where the cache reads it from. A record is data: a result path naming another
        step's directory, or one with `../`, was shown as this step's result."""
        LocalWorkspace._fix_step_info(info)
        if info.result_location is not None:
            own = plain_name(info.unique_id)
            info.result_location = str(self.step_dir(info.unique_id).absolute()) if own else None

    def _abandoned(self, unique_id: str) -> bool:
        """Nobody holds the step's lock (we could take it): the job that ran it is gone."""
        if any(step.unique_id == unique_id for step in self.locks):
            return False  # running in this process
        return lock_is_free(self.step_dir(unique_id) / "lock")

    # --- A step's life: started, then finished or failed, all under its lock ------------------

    def step_starting(self, step: Step) -> None:
        if not step.cache_results:
            return
        lock = FileLock(self._step_lock_file(step), read_only_ok=True)
        self._acquire_step_lock(step, lock)
        try:
            done = self._begin(step)
        except BaseException:
            lock.release()
            raise
        if done:
            lock.release()
            # Step.result reads a step in this state from the cache (Tango's own race handling).
            raise StepStateError(step, StepState.COMPLETED)
        self.locks[step] = lock

    def _acquire_step_lock(self, step: Step, lock: FileLock) -> None:
        try:
            lock.acquire(timeout=self.QUIET_WAIT_S)
        except Timeout:
            self._wait_for_step_lock(step, lock)

    def _wait_for_step_lock(self, step: Step, lock: FileLock) -> None:
        logger.warning("Step %s is running in another process; waiting for it", step.name)
        lock.acquire_with_updates(desc=f"waiting for '{step.name}'")

    def _begin(self, step: Step) -> bool:
        """Under the step's lock: True if its result is in the cache already (its record made
        to say so); else marks it running here, after clearing what a dead job left."""
        with self._records() as records:
            info = step_record(records, step)
            now = utc_now_datetime()
            if step in self.step_cache:
                if info.state != StepState.COMPLETED:  # its job died after writing the result
                    record_completed(records, info, self.step_dir(step))
                return True
            remove_partial_result(self.step_dir(step))
            if info.state == StepState.FAILED:
                info.refresh()  # the environment may have changed since
            info.start_time = now
            info.end_time = None
            info.error = None
            info.result_location = None
            records[step.unique_id] = info
        return False

    def step_finished(self, step: Step, result: T) -> T:
        if not step.cache_results:
            return result
        self.step_cache[step] = result  # on failure the lock stays for step_failed to release
        if hasattr(result, "__next__"):
            result = self.step_cache[step]  # writing consumed the iterator
        self._end(step, error=None)
        return result

    def step_failed(self, step: Step, e: BaseException) -> None:
        if not step.cache_results:
            return
        self._end(step, error=exception_to_string(e))

    def _end(self, step: Step, error: str | None) -> None:
        """The record says finished (or failed); then, and only then, the lock goes."""
        lock = self.locks.pop(step)
        try:
            with self._records() as records:
                info = step_record(records, step)
                info.end_time = utc_now_datetime()
                info.start_time = info.start_time or info.end_time
                info.error = error
                if error is None:
                    info.result_location = str(self.step_dir(step).absolute())
                records[step.unique_id] = info
        finally:
            lock.release()

    # --- Whole-workspace changes ----------------------------------------------------------------

    def register_run(self, targets: Iterable[Step], name: str | None = None) -> Run:
        """One registration at a time: its records, its name and the `latest` link. A run or step
        name that would make Tango write outside the workspace is refused first."""
        targets = list(targets)
        if name is not None:
            check_path_name(name, "run name (-n)")
        for step in targets:
            check_path_name(step.name, "step name")
        with self._records_lock:
            run = super().register_run(targets, name)
        steps = set(targets).union(*(step.recursive_dependencies for step in targets))
        if self._record_cached_results(steps):
            run = self.registered_run(run.name)
        return run

    def _record_cached_results(self, steps: Iterable[Step]) -> bool:
        """Records that do not say so for results in the cache (the database was moved away,
        or a job died between writing a result and its record) are made to; True if any."""
        fixed = False
        with self._records() as records:
            for step in steps:
                info = step_record(records, step)
                if info.state != StepState.COMPLETED and step in self.step_cache:
                    record_completed(records, info, self.step_dir(step))
                    fixed = True
        return fixed

    def remove_step(self, step_unique_id: str) -> None:
        if not self._abandoned(step_unique_id) and self.step_dir(step_unique_id).exists():
            raise ConfigurationError(
                f"{self.step_dir(step_unique_id)}: the step is running in another process; "
                "wait for it, or stop that run first"
            )
        with self._records_lock:
            super().remove_step(step_unique_id)


def record_completed(records: StepRecords, info: StepInfo, result: Path) -> None:
    """The record of a step whose result is in the cache says so."""
    now = utc_now_datetime()
    info.start_time = info.start_time or now
    info.end_time = now
    info.error = None
    info.result_location = str(result.absolute())
    records[info.unique_id] = info


def lock_is_free(path: Path) -> bool:
    """Nobody holds the lock file at `path` (or there is none): we could take it."""
    if not path.exists():
        return True
    probe = FileLock(path)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return False
    probe.release()
    return True


def step_record(records: StepRecords, step_or_unique_id: Step | str) -> StepInfo:
    """A step's record; a step seen for the first time is added, with its dependencies."""
    step = step_or_unique_id if isinstance(step_or_unique_id, Step) else None
    unique_id = step.unique_id if step is not None else str(step_or_unique_id)
    try:
        return records[unique_id]
    except KeyError:
        if step is None:
            raise
    for dependency in step.dependencies:
        step_record(records, dependency)
    info = StepInfo.new_from_step(step)
    records[unique_id] = info
    return info
