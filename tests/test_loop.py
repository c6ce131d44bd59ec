"""The training loop without `tango run`: what it stops on, what it records, what it refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError
from tango.step_info import StepState

from catwalk_steps.engines.base import NonFiniteLossError
from catwalk_steps.launch.launcher import run_training
from catwalk_steps.steps.train import TrainRankClassifier
from catwalk_steps.workspace.shared import SharedLocalWorkspace

from .training import dataset, engine, history, job, loader, model_spec


@pytest.mark.slow
@pytest.mark.parametrize("device_count", [1, pytest.param(2, marks=pytest.mark.distributed)])
def test_a_non_finite_loss_stops_training_with_one_clear_line(tmp_path, device_count):
    """In a worker process too: the launcher rebuilds the error from the worker's report."""
    blow_up = engine(optimizer={"type": "torch::AdamW", "lr": 1e9}, max_grad_norm=1.0)
    with pytest.raises(NonFiniteLossError) as error:
        run_training(
            job(tmp_path / "w", device_count=device_count, engine_block=blow_up, train_steps=20)
        )
    message = str(error.value)
    assert message.startswith("training step ") and "\n" not in message
    assert "loss is nan (the usual cause is a learning rate too high" in message


@pytest.mark.slow
def test_history_holds_every_logged_step_and_validation(tmp_path):
    run_training(job(tmp_path / "w", device_count=1, train_steps=8, validate_every=4))
    logged = history(tmp_path / "w")
    assert [e["step"] for e in logged["train"]] == list(range(1, 9))
    assert [v["step"] for v in logged["validation"]] == [4, 8]
    assert all(v["count"] == 20 for v in logged["validation"])


def test_a_missing_split_fails_before_training(tmp_path):
    from tango.common import Lazy, Params
    from tango.integrations.torch import Model

    step = TrainRankClassifier(
        model=Lazy(Model, Params(model_spec())),
        training_engine=engine(),
        dataset_dict=dataset(),
        train_dataloader=loader(4),
        validation_split="dev",
        train_steps=2,
    )
    workspace = SharedLocalWorkspace(tmp_path / "ws")
    with pytest.raises(ConfigurationError) as error:
        step.result(workspace)
    assert str(error.value) == (
        "train: split 'dev' is not in the dataset (splits: train, validation)"
    )
    assert workspace.step_info(step).state == StepState.FAILED
    assert list((workspace.step_dir(step) / "work").iterdir()) == []  # nothing was started


def test_a_finished_worker_leaves_with_code_0_and_its_output_flushed():
    """Finalization is skipped (it can abort on a gloo thread); buffered output still arrives."""
    import subprocess
    import sys

    leave = (
        "import atexit, sys; "
        "from catwalk_steps.launch.worker_process import leave_finished_worker; "
        "atexit.register(lambda: print('finalized')); "
        "sys.stdout.write('last line, unflushed'); leave_finished_worker()"
    )
    done = subprocess.run([sys.executable, "-c", leave], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "last line, unflushed")


def test_a_worker_that_fails_while_the_launcher_looks_is_a_failure():
    """A worker seen running, then exited with code 1 at the next look (its sentinel closes
    before it can be reaped): the launcher reports a failure, never "all finished"."""
    import os

    import torch.multiprocessing as torch_mp

    from catwalk_steps.launch.launcher import watch

    class FailsWhileLookedAt:
        def __init__(self, sentinel: int):
            self.sentinel, self.looks, self.pid = sentinel, 0, 1

        @property
        def exitcode(self) -> int | None:
            self.looks += 1
            return None if self.looks == 1 else 1

        def join(self, timeout=None):
            pass

        def is_alive(self):
            return False

    read, write = os.pipe()
    os.close(write)  # the sentinel is ready, as when the worker has exited
    try:
        context = torch_mp.ProcessContext([FailsWhileLookedAt(read)], ["/nonexistent"])
        with pytest.raises(torch_mp.ProcessExitedException):
            watch(context)
    finally:
        os.close(read)


def test_a_worker_lost_while_the_workers_start_stops_those_started_in_one_line(monkeypatch):
    """A worker killed before it has read its job breaks torch's `start_processes` (a broken
    pipe to the fork server): the workers already started are stopped, not left waiting for it
    (they kept `tango run` from exiting), and the cause is one line."""
    import multiprocessing
    import signal
    import time
    from types import SimpleNamespace

    from catwalk_steps.launch import launcher

    started = []

    def start_then_lose_one(*args, **kwargs):
        first = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
        first.start()
        started.append(first)
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(launcher.torch_mp, "start_processes", start_then_lose_one)
    job = SimpleNamespace(local_world_size=2, AFTER_FAILURE="run the step again")
    with pytest.raises(launcher.WorkerFailed) as error:
        launcher.launched(job, 0, None, None)
    assert str(error.value) == (
        "a worker died while the workers were starting (BrokenPipeError: [Errno 32] Broken "
        "pipe); the other workers were stopped (run the step again)"
    )
    assert started[0].exitcode == -signal.SIGTERM


def test_torchs_error_files_are_named_in_the_runs_own_directory(tmp_path, monkeypatch):
    """Torch unpickles a failed worker's error file: named in a shared $TMPDIR, another user
    could put a pickle there first (and one written there outlived a killed run)."""
    import stat
    import tempfile
    from types import SimpleNamespace

    from catwalk_startup.exit_with_parent import RUN_ENV
    from catwalk_steps.launch import launcher

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    monkeypatch.setenv(RUN_ENV, str(run_dir))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(launcher, "START_METHOD", "fork")  # no fork server for two no-ops
    monkeypatch.setattr(launcher, "worker_main", print)  # print(i, *args): prints, returns
    job = SimpleNamespace(local_world_size=2)
    context = launcher.launched(job, 0, None, None)
    while not context.join():
        pass
    assert [Path(f).parent for f in context.error_files] == [run_dir, run_dir]
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert tempfile.gettempdir() == str(tmp_path)  # the default is back


def test_a_worker_whose_launcher_is_gone_exits_without_a_traceback_file(tmp_path, monkeypatch):
    """A failing worker reports to its launcher through a pipe; with the launcher gone, the
    report fails too (a broken pipe), and the worker still exits at once, code 1, instead of
    raising into torch's wrapper, which wrote a traceback file (left behind by a killed run)."""
    import tempfile
    from types import SimpleNamespace

    import torch.multiprocessing as torch_mp

    from catwalk_steps.launch.worker_process import worker_main

    class LauncherGone:
        def put(self, report):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    job = SimpleNamespace(local_world_size=1)  # no include_package: the worker fails at once
    context = torch_mp.start_processes(
        worker_main,
        args=(job, 0, LauncherGone(), os.getpid(), None),
        nprocs=1,
        join=False,
        start_method="fork",
    )
    with pytest.raises(torch_mp.ProcessExitedException) as failed:  # not ProcessRaisedException
        while not context.join():
            pass
    assert failed.value.exit_code == 1
    assert list(tmp_path.iterdir()) == []


def test_a_worker_dies_with_its_launcher_even_when_the_launcher_is_killed_outright(tmp_path):
    """A forked worker's parent is the fork server, so the worker watches the launcher itself.
    (The worker is forked from the tests' command server, as workers fork from a fork server.)"""
    import contextlib
    import os
    import signal
    import subprocess

    from .conftest import TANGO_ENV
    from .served import Served

    launcher = subprocess.Popen(["sleep", "60"])
    worker = Served("watch", [str(launcher.pid)], dict(TANGO_ENV), tmp_path / "worker")
    try:
        assert worker.first_line(worker.out) == "watching"
        launcher.kill()
        launcher.wait()
        assert worker.wait(timeout=10) == -signal.SIGKILL
    finally:
        launcher.kill()
        launcher.wait()
        with contextlib.suppress(ProcessLookupError):
            if worker.poll() is None:
                os.kill(worker.pid, signal.SIGKILL)


def test_the_engine_and_callbacks_get_the_steps_that_epochs_make(tmp_path):
    """With `train_epochs`, `train_steps` is known once the loop has its loader: the engine and
    the callbacks are built with the config that says it (passed, never set afterwards)."""
    import math
    from dataclasses import replace

    from catwalk_steps.training.job import train_config_for
    from catwalk_steps.training.loop import Trainer

    planned = job(tmp_path / "w", device_count=1)
    epochs = replace(planned.schedule, train_steps=None, train_epochs=2, grad_accum=3)
    planned = replace(planned, schedule=epochs)
    trainer = Trainer(planned, train_config_for(planned, 0, 0))
    steps = math.ceil(len(trainer.train_loader) * 2 / 3)
    assert trainer.schedule.train_steps == steps and steps > 1
    assert trainer.engine.train_config.train_steps == steps
    assert [callback.train_config.train_steps for callback in trainer.callbacks] == [steps]
