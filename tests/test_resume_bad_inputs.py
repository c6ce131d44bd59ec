"""What a run would resume from, or is given to read, that does not fit it, through the real
command: `resume_from` a checkpoint trained on other data or of another model (one line naming
both, before training starts; the model's shape already when the step graph is built), a path
that does not exist, a checkpoint written before manifests recorded data and model (it still
resumes), and a pickled `pytorch_model.bin` under every evaluation engine (one line naming the
file), and a full disk while a step result or a checkpoint is written (one line naming the
file; nothing partial kept)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import commands
from .commands import error_lines
from .conftest import EXPERIMENTS, TINY_DEMO, tango_command

DEMO = EXPERIMENTS / "demo.jsonnet"
T = "steps.trained"


def tango(workspace: Path, name: str, overrides: dict) -> tuple[int, str]:
    done = commands.run(tango_command(DEMO, workspace, name, overrides), timeout=300)
    return done.returncode, done.stdout + done.stderr


def only_line(output: str, start: str) -> str:
    """The one error line of a failed run, which must start with `start`."""
    lines = error_lines(output)
    assert len(lines) == 1 and "Traceback" not in output, output[-4000:]
    assert lines[0].split(" ERROR ", 1)[-1].lstrip("❯ ").startswith(start), lines
    return lines[0]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A workspace where the tiny demo ran as `source` (its checkpoint: step 2)."""
    workspace = tmp_path_factory.mktemp("resume_source") / "ws"
    code, output = tango(workspace, "source", TINY_DEMO)
    assert code == 0, output[-4000:]
    return workspace


@pytest.fixture(scope="module")
def trained(source) -> Path:
    """The trained step's work directory."""
    return next((source / "cache").glob("TrainRankClassifier-*/work"))


def test_resume_from_other_data_is_one_line_naming_both_before_training(tmp_path, trained):
    other = {**TINY_DEMO, "steps.data.task.sizes": {"train": 24, "validation": 8}}
    code, output = tango(tmp_path / "ws", "other_data", {**other, f"{T}.resume_from": str(trained)})
    assert code != 0
    line = only_line(output, "ConfigurationError: ")
    assert "/checkpoints/step000000002: trained on task 'SyntheticTask' (split 'train': 16 " in line
    assert "but this run trains on task 'SyntheticTask' (split 'train': 24 instances" in line
    assert 'Starting step "trained"' in output and "Training on" not in output


def test_resume_from_another_model_is_one_line_when_the_graph_is_built(tmp_path, trained):
    overrides = {**TINY_DEMO, f"{T}.model.config.n_embd": 48, f"{T}.resume_from": str(trained)}
    code, output = tango(tmp_path / "ws", "other_model", overrides)
    assert code != 0
    line = only_line(output, "ConfigurationError: train.resume_from: ")
    assert "holds a GPT2LMHeadModel of " in line and "but this run trains a GPT2LMHeadModel" in line
    assert "lm.transformer.wte.weight: [257, 64] there, [257, 48] here)" in line
    assert "Starting step" not in output  # the step graph: nothing ran


def test_a_checkpoint_from_before_data_and_model_were_recorded_still_resumes(tmp_path, trained):
    """A manifest without `data` and `model` (written before they were) compares nothing."""
    import shutil

    old = tmp_path / "old_work"
    shutil.copytree(trained, old, symlinks=True)
    complete = old / "checkpoints" / "step000000002" / "COMPLETE.json"
    manifest = json.loads(complete.read_text())
    assert manifest.pop("data")["instances"] == 16 and manifest.pop("model")["shapes"]
    complete.write_text(json.dumps(manifest))
    other = {**TINY_DEMO, "steps.data.task.sizes": {"train": 24, "validation": 8}}
    code, output = tango(tmp_path / "ws", "older", {**other, f"{T}.resume_from": str(old)})
    assert code == 0, output[-4000:]
    assert "Resumed from " in output and "at step 2" in output


def test_resume_from_a_path_that_does_not_exist_says_so(tmp_path):
    missing = tmp_path / "no" / "such" / "work"
    code, output = tango(
        tmp_path / "ws", "missing", {**TINY_DEMO, f"{T}.resume_from": str(missing)}
    )
    assert code != 0
    only_line(output, f"ConfigurationError: train.resume_from: {missing} does not exist")
    assert "Starting step" not in output


class Touch:
    """Unpickled, it would create its file."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def pickled_bin(directory: Path, marker: Path) -> Path:
    """The model's weights as a `pytorch_model.bin` that also holds a pickled object."""
    import torch
    from safetensors.torch import load_file

    state = load_file(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    torch.save({**state, "payload": Touch(marker)}, directory / "pytorch_model.bin")
    return directory / "pytorch_model.bin"


@pytest.mark.slow
def test_a_pickled_bin_is_one_line_naming_it_under_every_evaluation_engine(tmp_path, source):
    """Named in the config: at graph build, whatever the engine. A step's result: when the step
    that reads it runs (one device, FSDP2's two processes). Nothing is unpickled."""
    import shutil

    from .conftest import step_result

    marker = tmp_path / "unpickled"
    result = step_result(source, "source", "trained")
    configured = tmp_path / "configured"
    shutil.copytree(result, configured)
    files = [pickled_bin(configured, marker), pickled_bin(result, marker)]
    fsdp2 = {"device_count": 2, "engine": {"type": "catwalk::torch_fsdp"}}
    model = {"type": "catwalk::rank_classifier", "pretrained": str(configured)}
    cases = {
        "configured": (
            {**TINY_DEMO, "steps.eval_untrained.model": model}
            | {f"steps.eval_untrained.{key}": value for key, value in fsdp2.items()},
            files[0],
        ),
        "one_device": ({**TINY_DEMO, "steps.eval_trained.max_length": 64}, files[1]),
        "fsdp2": (
            {**TINY_DEMO, "steps.eval_trained.max_length": 64}
            | {f"steps.eval_trained.{key}": value for key, value in fsdp2.items()},
            files[1],
        ),
    }
    started = {}
    for name, (overrides, _) in cases.items():
        out = tmp_path / f"{name}.txt"
        started[name] = (commands.start(tango_command(DEMO, source, name, overrides), out), out)
    for name, (command, out) in started.items():
        assert command.wait(300) == 1, (name, out.read_text()[-3000:])
        # one device: the parent reads the cached result; FSDP2's workers read its directory
        error = "DamagedResultError: " if name == "one_device" else "DamagedModelError: "
        line = only_line(out.read_text(), error)
        expected = f"{cases[name][1]}: holds something other than tensors and plain data"
        assert expected in line, (name, line)
    assert "Starting step" not in (tmp_path / "configured.txt").read_text()  # at graph build
    assert not marker.exists()


# --- A full disk ---------------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(directory: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `directory` (root only), unmounted whatever happens."""
    directory.mkdir()
    argv = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)]
    mounted = subprocess.run(argv, capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here ({mounted.stderr.strip()})")
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)]).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)])


@pytest.mark.slow
def test_a_full_disk_is_one_line_naming_the_file_and_nothing_partial_is_kept(tmp_path):
    """A 600 KB workspace: the data step's result (8000 instances) does not fit; the tiny demo's
    data does, its checkpoint does not (one process; FSDP2's two, whose writer, DCP, names no
    file: the checkpoint is named). Each: one line naming the file and the full disk, and what
    the write left is gone (a checkpoint without its manifest is never loaded: removed)."""
    with contextlib.ExitStack() as stack:
        disks = {name: stack.enter_context(small_disk(tmp_path / name, "600k")) for name in "abc"}
        big_data = {**TINY_DEMO, "steps.data.task.sizes": {"train": 8000, "validation": 8}}
        fsdp2 = {f"{T}.device_count": 2, f"{T}.training_engine.type": "catwalk::torch_fsdp"}
        runs = {  # each the step it is about (an evaluation beside it would meet the disk too)
            "a": ("result", big_data, "data"),
            "b": ("checkpoint", TINY_DEMO, "trained"),
            "c": ("fsdp2", {**TINY_DEMO, **fsdp2}, "trained"),
        }
        started = {}
        for disk, (name, overrides, step) in runs.items():
            out = tmp_path / f"{name}.txt"
            argv = tango_command(DEMO, disks[disk] / "ws", name, overrides, "-s", step)
            started[name] = (commands.start(argv, out), out)
        lines = {}
        for name, (command, out) in started.items():
            assert command.wait(300) == 1, (name, out.read_text()[-3000:])
            lines[name] = only_line(out.read_text(), "DiskFullError: ")
        cache = disks["a"] / "ws" / "cache"
        [data_dir] = cache.glob("LoadTask-*")
        assert (
            f"{data_dir / 'train.arrow'}: not written, the disk is full (no space left on it); "
            in lines["result"]
        )
        assert "step 'data' has no result (what it wrote is removed)" in lines["result"]
        assert not [p for p in data_dir.iterdir() if p.is_file() and p.name != "lock"]
        [work] = (disks["b"] / "ws" / "cache").glob("TrainRankClassifier-*/work")
        checkpoint = work / "checkpoints" / "step000000002"
        assert (
            f"{checkpoint}/" in lines["checkpoint"]
            and ".pt: not written, the disk is full (no space left on it); " in lines["checkpoint"]
        )
        assert "checkpoint step000000002 was incomplete and is removed" in lines["checkpoint"]
        assert not checkpoint.exists()
        [work] = (disks["c"] / "ws" / "cache").glob("TrainRankClassifier-*/work")
        checkpoint = work / "checkpoints" / "step000000002"
        assert f"{checkpoint}" in lines["fsdp2"] and "the disk is full" in lines["fsdp2"]
        assert "checkpoint step000000002 was incomplete and is removed" in lines["fsdp2"]
        assert not checkpoint.exists()


def test_a_write_the_disk_had_no_room_for_keeps_no_file_open(tmp_path):
    """The one line of a full disk is not chained to the writer's error, whose frames hold the
    half-written file open (on a tmpfs its pages stayed taken, and the failure's own record in
    stepinfo.sqlite found the disk still full), in a file's write and a checkpoint's alike."""
    import errno

    from catwalk_steps.files import DiskFullError, write_atomic
    from catwalk_steps.training.checkpointing import removed_when_full

    def write(path: Path) -> None:
        handle = path.open("w")  # held by this frame, as a library's writer holds its file
        assert not handle.closed
        raise OSError(errno.ENOSPC, "No space left on device")

    for wrapped in (contextlib.nullcontext, lambda: removed_when_full(tmp_path / "step2")):
        with pytest.raises(DiskFullError) as raised, wrapped():
            write_atomic(tmp_path / "model.pt", write)
        frames = [raised.value]
        while frames[-1].__context__ is not None:
            frames.append(frames[-1].__context__)
        assert not any(isinstance(e, OSError) for e in frames), frames
        assert raised.value.__suppress_context__ or raised.value.__context__ is None
    assert not list(tmp_path.glob(".model.pt.*"))


def test_the_rule_of_resuming_is_written_once():
    """The graph-build check and the step's, before any worker starts, apply one rule
    (`checkpoints.discovery.check_resumed`): only it compares what a checkpoint was trained on
    with the run; its line leads with the key where the graph build names one."""
    import ast

    from tango.common.exceptions import ConfigurationError

    from catwalk_steps.checkpoints.discovery import check_resumed

    package = Path(__file__).resolve().parents[1] / "catwalk_steps"
    comparing = sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "identity_problem"
    )
    assert comparing == ["checkpoints/discovery.py"]
    model = {"class": "GPT2LMHeadModel", "shapes": {"w": [2, 2]}}
    manifest = {"engine": "CatwalkTorchEngine", "model": model}
    other = {"model": {**model, "shapes": {"w": [3, 2]}}}
    with pytest.raises(ConfigurationError, match=r"^train.resume_from: step1: holds a GPT2"):
        check_resumed(Path("step1"), manifest, other, field="train.resume_from")
    with pytest.raises(ConfigurationError, match=r"^step1: written by CatwalkTorchEngine, but"):
        check_resumed(Path("step1"), manifest, other, engine="CatwalkFSDPEngine")
    check_resumed(Path("step1"), manifest, {"model": model}, engine="CatwalkTorchEngine")
