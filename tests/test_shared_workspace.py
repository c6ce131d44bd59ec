"""Several jobs on one workspace: whatever moment of a step's life one job is at, another job
that needs the step neither fails nor computes it twice (unless the first job failed or died,
then it computes it itself). Each job is held at its moment with events (tests/workspace_jobs.py),
never with sleeps. The same through `tango run`: tests/test_sweeps.py."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from tango.step_info import StepState
from tango.workspaces import LocalWorkspace

from catwalk_steps.workspace.shared import SharedLocalWorkspace

from .distributed import forkserver_context
from .workspace_jobs import (
    Job,
    cached_files,
    computations,
    job,
    read_result,
    shared_step,
)

pytestmark = [pytest.mark.distributed]  # several processes, each a few seconds of imports

# Jobs fork from a server that has imported Tango and the package once (a spawned job would
# spend seconds importing them).
CONTEXT = forkserver_context()
EXPECTED = {"key": "abc", "value": 3}
JOIN_S = 60


class Jobs:
    """Starts held jobs on one workspace and collects what each returned."""

    def __init__(self, tmp_path: Path):
        self.workspace = str(tmp_path / "ws")
        self.log = str(tmp_path / "computed.log")
        self.processes: dict[str, multiprocessing.Process] = {}
        self.queues: dict[str, multiprocessing.Queue] = {}
        self.events: dict[tuple[str, str], tuple] = {}

    def start(self, name: str, holds: tuple[str, ...] = (), **kwargs) -> None:
        held = {point: (CONTEXT.Event(), CONTEXT.Event()) for point in holds}
        self.events.update({(name, point): pair for point, pair in held.items()})
        spec = Job(self.workspace, "abc", self.log, name, held, **kwargs)
        self.queues[name] = CONTEXT.Queue()
        process = CONTEXT.Process(target=job, args=(spec, self.queues[name]), name=name)
        process.start()
        self.processes[name] = process

    def start_behind(self, name: str) -> None:
        """Starts job `name` and lets it go once it has found the step's lock taken (it then
        waits for the lock)."""
        self.start(name, holds=("waiting",))
        self.reached(name, "waiting")
        self.release(name, "waiting")

    def reached(self, name: str, point: str) -> None:
        assert self.events[name, point][0].wait(JOIN_S), f"{name} never reached {point}"

    def release(self, name: str, point: str) -> None:
        self.events[name, point][1].set()

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.kill()
        process.join(JOIN_S)

    def finish_one(self, name: str) -> tuple[str, object]:
        """What job `name` reported, once it has ended."""
        report = self.queues[name].get(timeout=JOIN_S)
        process = self.processes.pop(name)
        process.join(JOIN_S)
        assert process.exitcode == 0, f"{name} exited with {process.exitcode}"
        return report

    def finish(self) -> dict[str, tuple[str, object]]:
        """Every job not yet finished or killed runs to its end: what each reported."""
        return {name: self.finish_one(name) for name in list(self.processes)}

    @property
    def step(self):
        return shared_step("abc", self.log)

    def info(self):
        return SharedLocalWorkspace(self.workspace).step_info(self.step)


@pytest.fixture
def jobs(tmp_path):
    started = Jobs(tmp_path)
    yield started
    for process in started.processes.values():
        process.kill()
        process.join()


def test_a_job_that_has_not_yet_taken_the_lock_reads_what_the_other_computed(jobs):
    jobs.start("a", holds=("before_lock",))
    jobs.reached("a", "before_lock")  # its run registered, its step's record read
    jobs.start("b")
    assert jobs.finish_one("b") == ("ok", EXPECTED)
    jobs.release("a", "before_lock")
    assert jobs.finish() == {"a": ("ok", EXPECTED)}
    assert computations(jobs.log) == 1
    assert jobs.info().state == StepState.COMPLETED


def test_a_job_holding_the_lock_before_its_record_says_running_is_waited_for(jobs, tmp_path):
    jobs.start("a", holds=("locked",))
    jobs.reached("a", "locked")
    # What Tango 1.3.2 failed on: the lock is held and the record still says incomplete.
    assert jobs.info().state == StepState.INCOMPLETE
    with pytest.raises(OSError, match="can only be one of {running}"):
        LocalWorkspace(jobs.workspace).step_info(jobs.step)
    jobs.start_behind("b")
    jobs.release("a", "locked")
    assert jobs.finish() == {"a": ("ok", EXPECTED), "b": ("ok", EXPECTED)}
    assert computations(jobs.log) == 1


def test_a_running_step_is_waited_for_then_read_from_the_cache(jobs):
    jobs.start("a", holds=("running",))
    jobs.reached("a", "running")
    assert jobs.info().state == StepState.RUNNING
    jobs.start_behind("b")
    jobs.release("a", "running")
    assert jobs.finish() == {"a": ("ok", EXPECTED), "b": ("ok", EXPECTED)}
    assert computations(jobs.log) == 1


def test_a_result_being_written_is_waited_for_not_read_half_written(jobs):
    jobs.start("a", holds=("writing",))
    jobs.reached("a", "writing")  # data.json on disk, no cache metadata yet
    assert jobs.step not in SharedLocalWorkspace(jobs.workspace).step_cache
    jobs.start_behind("b")
    jobs.release("a", "writing")
    assert jobs.finish() == {"a": ("ok", EXPECTED), "b": ("ok", EXPECTED)}
    assert computations(jobs.log) == 1


def test_after_the_other_job_fails_the_waiting_job_computes_the_step_itself(jobs):
    jobs.start("a", holds=("running",), fail=True)
    jobs.reached("a", "running")
    jobs.start_behind("b")
    jobs.release("a", "running")
    reports = jobs.finish()
    assert reports["a"] == ("error", "RuntimeError: this job's step fails")
    assert reports["b"] == ("ok", EXPECTED)
    assert computations(jobs.log) == 1
    assert jobs.info().state == StepState.COMPLETED


def test_a_killed_job_s_lock_goes_with_it_and_the_waiting_job_takes_over(jobs):
    jobs.start("a", holds=("running",))
    jobs.reached("a", "running")
    jobs.start_behind("b")
    jobs.kill("a")
    assert jobs.finish() == {"b": ("ok", EXPECTED)}
    assert computations(jobs.log) == 1
    assert jobs.info().state == StepState.COMPLETED


def test_a_job_killed_while_writing_its_result_leaves_nothing_that_blocks_or_pollutes(jobs):
    jobs.start("a", holds=("writing",))
    jobs.reached("a", "writing")
    (Path(jobs.workspace) / "cache" / jobs.step.unique_id / "leftover.bin").write_bytes(b"x")
    jobs.kill("a")
    # Tango 1.3.2 kept such a step "running" for ever (its directory holds result files).
    assert jobs.info().state == StepState.INCOMPLETE
    jobs.start("b")
    assert jobs.finish() == {"b": ("ok", EXPECTED)}
    assert cached_files(jobs.workspace, jobs.step) == ["cache-metadata.json", "data.json"]
    assert read_result(jobs.workspace, jobs.step) == EXPECTED


def test_runs_registered_at_the_same_moment_both_stand_and_latest_names_one(jobs, tmp_path):
    jobs.start("a", holds=("registering",))
    jobs.reached("a", "registering")  # inside register_run, the `latest` link not yet moved
    waiting = CONTEXT.Event()
    jobs.start("b", records_waiting=waiting)
    assert waiting.wait(JOIN_S)  # b waits for the record lock instead of racing a's writes
    jobs.release("a", "registering")
    assert jobs.finish() == {"a": ("ok", EXPECTED), "b": ("ok", EXPECTED)}
    workspace = SharedLocalWorkspace(jobs.workspace)
    assert set(workspace.registered_runs()) == {"a", "b"}
    assert Path(os.readlink(workspace.latest_dir)).name == "b"


def test_a_new_workspace_s_settings_are_written_whole_before_tango_reads_them(tmp_path):
    directory = tmp_path / "fresh"
    SharedLocalWorkspace(directory)
    settings = directory / "settings.json"
    written = settings.stat().st_mtime_ns, settings.stat().st_ino
    SharedLocalWorkspace(directory)
    assert (settings.stat().st_mtime_ns, settings.stat().st_ino) == written
    assert settings.read_text().strip() == '{\n  "version": 2\n}'


def test_a_plain_workspace_path_builds_the_shared_workspace(tmp_path):
    from tango.workspace import Workspace

    assert type(Workspace.from_url(str(tmp_path / "ws"))) is SharedLocalWorkspace
    assert type(Workspace.from_url(f"local://{tmp_path}/ws2")) is SharedLocalWorkspace


def test_a_running_step_cannot_be_cleared(jobs):
    from tango.common.exceptions import ConfigurationError

    jobs.start("a", holds=("running",))
    jobs.reached("a", "running")
    with pytest.raises(ConfigurationError, match="running in another process"):
        SharedLocalWorkspace(jobs.workspace).remove_step(jobs.step.unique_id)
    jobs.release("a", "running")
    assert jobs.finish() == {"a": ("ok", EXPECTED)}
