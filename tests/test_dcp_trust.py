"""An FSDP2 checkpoint's data files are data: every entry DCP stores as bytes is read with
`torch.load(weights_only=True)`, never unpickled whole.

torch.distributed.checkpoint stores what is not a tensor (the optimizer's `param_groups`) as
torch.save blobs inside its `.distcp` files, and its default planner reads them with
`weights_only=False`. Here a blob is replaced with a pickle that would create a marker file
(its manifest rewritten to vouch for it), or a `.metadata` of DCP's own classes marks a model
weight as bytes pointing at such a pickle, or a model weight's own bytes in a `.distcp` file are
written over (a pickle, zeros); a rerun and a `resume_from` run, through `tango run`, skip that
checkpoint for the one before it in one line naming the file (and entry), and the marker never
appears.
"""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

from catwalk_steps.checkpoints.dcp_metadata import METADATA_FILE, read_metadata
from catwalk_steps.checkpoints.layout import (
    COMPLETE,
    DCP_MODEL_DIR,
    DCP_OPTIMIZER_DIR,
    checkpoint_dir,
)
from catwalk_steps.checkpoints.manifest import mark_complete

from . import commands
from .conftest import EXPERIMENTS, tango_command
from .test_trust import Payload
from .training import TINY_GPT2

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

EARLIER, PLANTED = 4, 8  # the two checkpoints the killed run leaves
DEMO = {  # the demo, tiny: FSDP2 on 2 processes, checkpoints at steps 4, 8 and 12
    "steps.data.task.sizes": {"train": 96, "validation": 24},
    "steps.trained.model.config": TINY_GPT2,
    "steps.eval_untrained.model.config": TINY_GPT2,
    "steps.trained.training_engine.type": "catwalk::torch_fsdp",
    "steps.trained.train_steps": 12,
    "steps.trained.validate_every": 4,
    "steps.trained.checkpoint_every": 4,
    "steps.trained.train_dataloader.batch_size": 4,
}
WEIGHT = "lm.transformer.wte.weight"


def tango(workspace: Path, overrides: dict, name: str) -> commands.Finished:
    """`tango run` of the demo's training step (the evaluations after it read no checkpoint)."""
    command = tango_command(
        EXPERIMENTS / "demo.jsonnet", workspace, name, overrides, "-s", "trained"
    )
    return commands.run(command, timeout=600)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[Path, dict]:
    """A workspace whose FSDP2 run was killed after step 9 (checkpoints at 4 and 8), and the
    overrides that run it again."""
    root = tmp_path_factory.mktemp("dcp_trust")
    faults = {"type": "test::faults", "pid_dir": str(root / "pids"), "kill_step": 9}
    overrides = {**DEMO, "steps.trained.callbacks": [faults]}
    done = tango(root / "ws", overrides, "first")
    assert done.returncode != 0, done.stdout[-4000:]
    work_dir = work_dir_in(root / "ws")
    assert (checkpoint_dir(work_dir, PLANTED) / COMPLETE).is_file()
    assert (checkpoint_dir(work_dir, EARLIER) / COMPLETE).is_file()
    return root / "ws", overrides


def copy_of(workspace: Path, tmp_path: Path) -> Path:
    """The workspace's steps and records (its runs' links point into the original)."""
    copy = tmp_path / "ws"
    shutil.copytree(workspace, copy, ignore=shutil.ignore_patterns("runs", "latest"))
    return copy


def work_dir_in(workspace: Path) -> Path:
    return next((workspace / "cache").glob("TrainRankClassifier-*/work"))


def saved_pickle(marker: Path) -> bytes:
    """What DCP stores for a non-tensor entry (a torch.save blob), holding the payload."""
    buffer = io.BytesIO()
    torch.save(Payload(marker), buffer)
    return buffer.getvalue()


def point_entry_at(directory: Path, name: str, relative_path: str, data: bytes) -> Path:
    """Appends `data` to `relative_path` and rewrites the `.metadata` (of DCP's own classes)
    so that entry `name` is stored as bytes there; returns that file."""
    metadata = read_metadata(directory)
    path = directory / relative_path
    offset = path.stat().st_size
    with open(path, "ab") as f:
        f.write(data)
    index = MetadataIndex(name)
    old = metadata.storage_data.get(index)
    location = {"relative_path": relative_path, "offset": offset, "length": len(data)}
    if old is not None:
        metadata.storage_data[index] = dataclasses.replace(old, **location)
    else:
        info_type = type(next(iter(metadata.storage_data.values())))
        metadata.storage_data[index] = info_type(**location)
    metadata.state_dict_metadata[name] = BytesStorageMetadata()
    (directory / METADATA_FILE).write_bytes(pickle.dumps(metadata))
    return path


def vouch(checkpoint: Path) -> None:
    """Rewrites the manifest to match the files (an attacker who can write the directory)."""
    info = json.loads((checkpoint / COMPLETE).read_text())
    info.pop("files")
    mark_complete(checkpoint, info)


def plant(checkpoint: Path, vector: str, marker: Path) -> Path:
    """Plants the payload in `checkpoint`; returns the file the refusal must name."""
    if vector == "optimizer entry":  # param_groups.0.lr, a torch.save blob in a .distcp file
        directory = checkpoint / DCP_OPTIMIZER_DIR
        entry = "param_groups.0.lr"
        relative = read_metadata(directory).storage_data[MetadataIndex(entry)].relative_path
        planted = point_entry_at(directory, entry, relative, saved_pickle(marker))
    else:  # a model weight that the metadata says is stored as bytes
        directory = checkpoint / DCP_MODEL_DIR
        point_entry_at(directory, WEIGHT, "__0_0.distcp", saved_pickle(marker))
        planted = directory / METADATA_FILE
    vouch(checkpoint)
    return planted


def one_skip_naming(output: str, planted: Path) -> None:
    skipped = [line for line in output.splitlines() if "Skipping checkpoint:" in line]
    assert len(skipped) == 1, skipped
    assert f"Skipping checkpoint: {planted}" in skipped[0], skipped
    assert "Traceback" not in output


def write_over(checkpoint: Path, damage: str, marker: Path) -> str:
    """Writes over the bytes of rank 0's part of the model weight `WEIGHT` in its `.distcp`
    file (a pickle that would create `marker`, or 200 zero bytes), the file's size kept, and
    vouches for it; returns the file and entry the refusal must name."""
    directory = checkpoint / DCP_MODEL_DIR
    storage = read_metadata(directory).storage_data
    info = next(
        info
        for index, info in storage.items()
        if index.fqn == WEIGHT and info.relative_path == "__0_0.distcp"
    )
    data = pickle.dumps(Payload(marker), protocol=2) if damage == "pickle" else bytes(200)
    assert len(data) <= info.length
    with open(directory / info.relative_path, "r+b") as f:
        f.seek(info.offset)
        f.write(data)
    vouch(checkpoint)
    return f"{directory / info.relative_path} (entry '{WEIGHT}')"


def resumed_past(stopped, tmp_path: Path, how: str, damage: Callable[[Path, Path], object]):
    """Damages the stopped run's newest checkpoint (`damage(checkpoint, marker)` returns what
    the skip must name), runs again (`how`), and checks that the run skipped it in one line
    for the one before, and finished; nothing planted ran."""
    workspace, overrides = stopped
    copy = copy_of(workspace, tmp_path)
    work_dir = work_dir_in(copy)
    marker = tmp_path / "pwned"
    planted = damage(checkpoint_dir(work_dir, PLANTED), marker)
    if how == "rerun":  # the same command again: the failed step resumes
        done = tango(copy, overrides, "rerun")
    else:  # another run resuming from the planted one's work directory
        settings = {**overrides, "steps.trained.resume_from": str(work_dir)}
        done = tango(tmp_path / "other", settings, "other")
    assert not marker.exists()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    one_skip_naming(output, planted)
    assert f"Resumed from {checkpoint_dir(work_dir, EARLIER)} at step {EARLIER}" in output


@pytest.mark.parametrize("how", ["rerun", "resume_from"])
@pytest.mark.parametrize("vector", ["optimizer entry", "model weight as bytes"])
def test_a_pickle_planted_in_an_fsdp2_checkpoints_data_never_runs(stopped, tmp_path, vector, how):
    resumed_past(
        stopped, tmp_path, how, lambda checkpoint, marker: plant(checkpoint, vector, marker)
    )


@pytest.mark.parametrize(("how", "damage"), [("rerun", "pickle"), ("resume_from", "zeros")])
def test_a_model_weight_written_over_in_a_distcp_file_costs_that_checkpoint(
    stopped, tmp_path, how, damage
):
    """The tensor's own bytes, which DCP reads inside the collective load: every rank skips the
    checkpoint together, the line names the file and entry (it ended `WorkerFailed: rank 0:
    CheckpointException: CheckpointException ranks:dict_keys([0])` on every rerun)."""
    resumed_past(
        stopped, tmp_path, how, lambda checkpoint, marker: write_over(checkpoint, damage, marker)
    )


@pytest.mark.parametrize("damage", ["pickle", "zeros"])
def test_a_model_weight_written_over_is_named_with_its_file_and_entry(stopped, tmp_path, damage):
    """The load (here the whole model, as `catwalk-export` reads it) says which entry of which
    file it could not read, as data, in one line."""
    from catwalk_steps.checkpoints.dcp_loading import whole_state
    from catwalk_steps.checkpoints.layout import CheckpointError

    workspace, _ = stopped
    checkpoint = shutil.copytree(checkpoint_dir(work_dir_in(workspace), PLANTED), tmp_path / "c")
    marker = tmp_path / "pwned"
    named = write_over(checkpoint, damage, marker)
    with pytest.raises(CheckpointError) as error:
        whole_state(checkpoint / DCP_MODEL_DIR)
    message = str(error.value)
    assert message.startswith(f"{named}: holds something other than tensors and plain data"), (
        message
    )
    reason = "GLOBAL posix.system" if damage == "pickle" else "Unsupported operand 0"
    assert reason in message and "\n" not in message, message
    assert not marker.exists()


def test_catwalk_export_refuses_a_model_weight_stored_as_bytes(stopped, tmp_path):
    workspace, _ = stopped
    copy = copy_of(workspace, tmp_path)
    marker = tmp_path / "pwned"
    checkpoint = checkpoint_dir(work_dir_in(copy), PLANTED)
    planted = plant(checkpoint, "model weight as bytes", marker)
    export = str(Path(sys.executable).with_name("catwalk-export"))
    done = commands.run([export, str(checkpoint), str(tmp_path / "out")])
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{planted}: " in done.stderr and WEIGHT in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["planted", "truncated"])
def test_every_entry_stored_as_bytes_is_read_as_data_before_any_rank_loads(
    stopped, tmp_path, damage
):
    """What the resume runs on each rank before loading: a refused or cut entry is one line
    naming its file and entry."""
    from catwalk_steps.checkpoints.dcp_loading import check_entries
    from catwalk_steps.checkpoints.layout import CheckpointError

    workspace, _ = stopped
    checkpoint = shutil.copytree(checkpoint_dir(work_dir_in(workspace), PLANTED), tmp_path / "c")
    directory = checkpoint / DCP_OPTIMIZER_DIR
    marker = tmp_path / "pwned"
    index = MetadataIndex("param_groups.0.lr")
    info = read_metadata(directory).storage_data[index]
    blob = saved_pickle(marker)
    if damage == "truncated":  # the entry's own bytes, cut short
        with open(directory / info.relative_path, "rb") as f:
            f.seek(info.offset)
            blob = f.read(info.length)[: info.length // 2]
    planted = point_entry_at(directory, index.fqn, info.relative_path, blob)
    with pytest.raises(CheckpointError) as error:
        check_entries(directory)
    message = str(error.value)
    assert message.startswith(f"{planted} (entry 'param_groups.0.lr'): "), message
    if damage == "planted":
        assert "holds something other than tensors and plain data" in message
        assert "GLOBAL posix.system" in message
    else:
        assert "cannot be read" in message
    assert "\n" not in message
    assert not marker.exists()


def test_an_entry_stored_as_bytes_where_the_state_has_a_tensor_is_refused(stopped):
    """The collective load itself refuses bytes where a tensor belongs (an optimizer's state
    too), in case a file changes after the check before it."""
    from catwalk_steps.checkpoints.dcp_loading import load_as_data
    from catwalk_steps.checkpoints.layout import CheckpointError

    workspace, _ = stopped
    directory = checkpoint_dir(work_dir_in(workspace), PLANTED) / DCP_OPTIMIZER_DIR
    with pytest.raises(CheckpointError) as error:
        load_as_data({"param_groups.0.lr": torch.zeros(())}, directory, no_dist=True)
    assert str(error.value) == (
        f"{directory / METADATA_FILE}: entry 'param_groups.0.lr' is not stored as a tensor, "
        "which it must be (a model's weight, an optimizer's state); the checkpoint is not loaded"
    )
