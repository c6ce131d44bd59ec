"""A checkpoint is data, never code, and a damaged one costs one checkpoint, never the run.

A planted pickle (a payload that would create a marker file when unpickled) is put where a run,
`resume_from` or `catwalk-export` reads: it is refused in one line and the marker never appears.
A checkpoint damaged in place (same size, other bytes) is skipped for the one before it, and the
run still ends bit for bit where it had ended.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import pytest
import torch

from catwalk_steps.checkpoints import (
    CheckpointError,
    checkpoint_dir,
    complete_checkpoints,
    problem_with,
)
from catwalk_steps.checkpoints.layout import COMPLETE, TRAINER_FILE
from catwalk_steps.checkpoints.manifest import mark_complete
from catwalk_steps.checkpoints.state import load_file
from catwalk_steps.launch import run_training

from . import commands
from .training import engine, history, job, reproducible, weights


class Payload:
    """Unpickling this runs `touch marker`."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant(path: Path, marker: Path, rewrite_manifest: bool = False) -> None:
    """Replaces `path` with a pickle that would create `marker`; optionally also rewrites the
    checkpoint's manifest to vouch for it (an attacker who can write the whole directory)."""
    if path.suffix == ".pt":
        torch.save({"state": Payload(marker)}, path)
    else:  # DCP's metadata: a plain pickle
        path.write_bytes(pickle.dumps({"state": Payload(marker)}))
    if rewrite_manifest:
        directory = path.parent
        while not (directory / COMPLETE).exists():
            directory = directory.parent
        info = json.loads((directory / COMPLETE).read_text())
        info.pop("files")
        mark_complete(directory, info)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 12-step run (float32, CPU, dropout on), checkpoints at 4, 8 and 12."""
    work_dir = tmp_path_factory.mktemp("trust") / "run"
    run_training(job(work_dir, device_count=1, train_steps=12, dropout=True))
    return work_dir


def copy_of(run: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "copy"
    shutil.copytree(run, target)
    return target


def test_the_newest_two_checkpoints_and_the_best_are_kept(finished):
    kept = [d.name for d in complete_checkpoints(finished)]
    assert kept[:2] == ["step000000012", "step000000008"]


@pytest.mark.slow
def test_a_latest_checkpoint_damaged_in_place_costs_one_checkpoint_not_the_run(
    finished, tmp_path, caplog
):
    import logging

    run = copy_of(finished, tmp_path)
    latest = checkpoint_dir(run, 12)
    trainer = latest / TRAINER_FILE
    data = bytearray(trainer.read_bytes())
    data[200:264] = bytes(64)  # 64 zero bytes: same size, other content
    trainer.write_bytes(bytes(data))
    assert (
        problem_with(latest)
        == f"{trainer}: its content changed since it was written (SHA-256 differs)"
    )
    with caplog.at_level(logging.INFO):
        run_training(job(run, device_count=1, train_steps=12, dropout=True))
    assert f"Skipping checkpoint: {trainer}: its content changed" in caplog.text
    assert f"Resumed from {checkpoint_dir(run, 8)} at step 8" in caplog.text
    assert reproducible(history(run)) == reproducible(history(finished))
    for name, value in weights(finished).items():
        assert torch.equal(weights(run)[name], value), name


def test_a_planted_trainer_state_is_refused_even_when_the_manifest_vouches_for_it(
    finished, tmp_path
):
    run = copy_of(finished, tmp_path)
    marker = tmp_path / "pwned"
    planted = checkpoint_dir(run, 12) / TRAINER_FILE
    plant(planted, marker)
    assert planted.name in problem_with(planted.parent)  # caught by the manifest first
    plant(planted, marker, rewrite_manifest=True)  # now the manifest says it is fine
    assert problem_with(planted.parent) is None
    with pytest.raises(CheckpointError) as error:
        load_file(planted)
    assert str(error.value).startswith(f"{planted}: holds something other than tensors")
    assert "\n" not in str(error.value)
    assert not marker.exists()


@pytest.mark.parametrize("how", ["rerun", "resume_from", "export"])
def test_a_planted_pickle_never_runs_wherever_the_checkpoint_is_read(finished, tmp_path, how):
    run = copy_of(finished, tmp_path)
    marker = tmp_path / "pwned"
    for step in (4, 8, 12):  # every checkpoint planted: nothing to fall back to
        if checkpoint_dir(run, step).exists():
            plant(checkpoint_dir(run, step) / TRAINER_FILE, marker, rewrite_manifest=True)
    if how == "export":
        done = commands.run(
            [str(Path(sys.executable).with_name("catwalk-export")), str(run), str(tmp_path / "o")]
        )
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "holds something other than tensors" in done.stderr
        # torch's reason whole, naming what was refused (it was cut at 120 characters)
        assert (
            "(Trying to load unsupported GLOBAL posix.system whose module posix is blocked.)"
            in (done.stderr)
        )
    elif how == "rerun":
        run_training(job(run, device_count=1, train_steps=12))
        assert history(run)["train"][0]["step"] == 1  # nothing was resumed: trained anew
    else:  # an explicit resume_from that yields nothing fails, naming each refusal
        with pytest.raises(CheckpointError) as error:
            run_training(job(tmp_path / "again", device_count=1, train_steps=12, resume_from=run))
        message = str(error.value)
        assert message.startswith(f"train.resume_from {run}: nothing there can be resumed (")
        assert message.count("holds something other than tensors") == 2  # steps 12 and 8
        assert "\n" not in message
    assert not marker.exists()


def test_a_planted_dcp_metadata_is_never_unpickled_even_when_the_manifest_vouches_for_it(
    tmp_path, caplog
):
    """FSDP2's checkpoint metadata is a pickle: it is read with an unpickler that admits only
    DCP's metadata classes, so a planted one fails in one line however the manifest was
    rewritten; resuming skips that checkpoint for the one before it."""
    import logging

    from catwalk_steps.commands.export import export_checkpoint

    run = tmp_path / "fsdp2"
    fsdp2 = engine("catwalk::torch_fsdp")
    run_training(job(run, device_count=1, train_steps=4, engine_block=fsdp2, checkpoint_every=2))
    latest = checkpoint_dir(run, 4)
    export_checkpoint(latest, tmp_path / "exported")  # whole, it exports
    marker = tmp_path / "pwned"
    planted = latest / "dcp_model" / ".metadata"
    plant(planted, marker)
    with pytest.raises(CheckpointError, match=r"\.metadata: (its content changed|\d+ bytes)"):
        export_checkpoint(latest, tmp_path / "again")
    plant(planted, marker, rewrite_manifest=True)  # now the manifest says it is fine
    with pytest.raises(CheckpointError) as error:
        export_checkpoint(latest, tmp_path / "again")
    assert str(error.value) == (
        f"{planted}: names posix.system, which is not part of a checkpoint's metadata; the "
        "file is not loaded (it was not written by torch.distributed.checkpoint)"
    )
    export = Path(sys.executable).with_name("catwalk-export")
    done = commands.run([str(export), str(latest), str(tmp_path / "cli")])  # the real command
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"CheckpointError: {planted}: names posix.system" in done.stderr
    with caplog.at_level(logging.INFO):
        run_training(
            job(run, device_count=1, train_steps=6, engine_block=fsdp2, checkpoint_every=2)
        )
    assert f"Skipping checkpoint: {planted}: names posix.system" in caplog.text
    assert f"Resumed from {checkpoint_dir(run, 2)} at step 2" in caplog.text
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("published", ["pickle", "wrong token"])
def test_a_store_impersonating_node_0_gets_no_code_run_and_is_refused_in_one_line(
    tmp_path, published
):
    """catwalk-worker reads node 0's message as JSON and checks its token against the one node 0
    wrote into the shared work directory: a fake store gets a refusal, never an unpickling."""
    from catwalk_steps.distributed.rendezvous import start_store
    from catwalk_steps.launch.launcher import JOB_KEY

    from .conftest import EXPERIMENTS

    marker = tmp_path / "pwned"
    store = start_store(2, port=0)
    overrides = {
        "steps.trained.num_nodes": 2,
        "steps.trained.device_count": 1,
        "steps.trained.master_addr": "127.0.0.1",
        "steps.trained.master_port": store.port,
    }
    if published == "pickle":
        store.set(JOB_KEY, pickle.dumps(Payload(marker)))
    else:
        from catwalk_steps.commands.worker import parse_args
        from catwalk_steps.launch.nodes import training_step

        arguments = [str(EXPERIMENTS / "demo.jsonnet"), "--node-rank", "1"]
        step_id = training_step(parse_args([*arguments, "-o", json.dumps(overrides)])).unique_id
        message = {"step_id": step_id, "token": "guessed", "dataset_sha256": "0" * 64}
        store.set(JOB_KEY, json.dumps(message))
    worker = [
        str(Path(sys.executable).with_name("catwalk-worker")),
        str(EXPERIMENTS / "demo.jsonnet"),
        "--node-rank",
        "1",
        "--timeout",
        "20",
        "-w",
        str(tmp_path / "ws"),
        "-o",
        json.dumps(overrides),
    ]
    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    SharedLocalWorkspace(tmp_path / "ws")  # the shared workspace, without node 0's token in it
    done = commands.run(worker)
    refusal = [line for line in done.stderr.splitlines() if line.startswith("catwalk-worker:")]
    assert done.returncode == 1 and len(refusal) == 1, done.stderr[-2000:]
    if published == "pickle":
        assert "is not a catwalk job; refusing it" in refusal[0]
    else:
        assert "the job's token does not match" in refusal[0]
    assert not marker.exists()
