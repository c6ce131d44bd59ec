"""Checkpoints that survive: complete sharded-optimizer state, resume on another device_count,
damaged checkpoints skipped, and (through `tango run`) a killed worker or an interrupted parent
followed by a rerun that ends bit for bit where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from catwalk_steps.checkpoints.discovery import complete_checkpoints
from catwalk_steps.checkpoints.layout import checkpoint_dir
from catwalk_steps.checkpoints.state import load_file
from catwalk_steps.launch.launcher import run_training

from . import commands
from .conftest import EXPERIMENTS, step_result, tango_command
from .distributed import run_distributed
from .training import BLOCKS, engine, history, job, reproducible, weights

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

OPTIMIZERS = {
    "plain": {"type": "torch::AdamW", "lr": 3e-3},
    "zero": {"type": "catwalk::zero", "optimizer": "torch::AdamW", "lr": 3e-3},
    "oss": {"type": "catwalk::oss", "optimizer": "torch::AdamW", "lr": 3e-3},
}


def optimizer_states(rank, world_size, port, work_dir):
    """The same 3 DDP steps with a plain, a ZeRO and an OSS AdamW; each one's saved state."""
    from tango.common import Lazy, Params
    from tango.integrations.torch import Model, Optimizer

    from catwalk_steps.engines.torch_engine import CatwalkTorchEngine
    from catwalk_steps.engines.train_config import NodeAwareTrainConfig

    from .test_engines import batch
    from .training import model_spec

    saved = {}
    for name, optimizer in OPTIMIZERS.items():
        config = NodeAwareTrainConfig(
            "t", Path(work_dir), worker_id=rank, is_distributed=True, world_size=world_size
        )
        model = Lazy(Model, Params(model_spec()))
        built = CatwalkTorchEngine(config, model, Lazy(Optimizer, Params(dict(optimizer))))
        for _ in range(3):
            loss, _ = built.forward_train(batch(rank), 0, 1)
            built.backward(loss)
            built.step()
        directory = Path(work_dir) / name
        directory.mkdir(exist_ok=True)
        built.save_state(directory)
        torch.distributed.barrier()
        saved[name] = type(built.optimizer).__name__
    return saved


def test_zero_and_oss_checkpoints_hold_the_whole_optimizer_state(tmp_path):
    [kinds, _] = run_distributed(optimizer_states, tmp_path, str(tmp_path))
    assert kinds == {"plain": "AdamW", "zero": "ZeroRedundancyOptimizer", "oss": "OSS"}
    plain = torch.load(tmp_path / "plain" / "optimizer.pt", weights_only=False)
    for name in ("zero", "oss"):
        sharded = torch.load(tmp_path / name / "optimizer.pt", weights_only=False)
        assert sharded["state"].keys() == plain["state"].keys()  # every parameter, not one shard
        for index, state in plain["state"].items():
            for key, value in state.items():
                # The same AdamW arithmetic on the same gradients: bitwise equal.
                assert torch.equal(sharded["state"][index][key], value), (name, index, key)


ENGINES = {
    "ddp": engine(),
    "ddp+zero": engine(optimizer=OPTIMIZERS["zero"]),
    "fairscale": engine("catwalk::fairscale", modules_to_wrap=[BLOCKS]),
    "fsdp2": engine("catwalk::torch_fsdp", modules_to_wrap=[BLOCKS]),
}


def final_loss(work_dir: Path) -> float:
    return history(work_dir)["train"][-1]["loss"]


@pytest.mark.parametrize("name", list(ENGINES))
def test_resume_on_another_device_count(tmp_path, name):
    """2 -> 1 and 1 -> 2 processes (same global batch): the final loss of an uninterrupted run."""
    two = job(tmp_path / "two", device_count=2, engine_block=ENGINES[name], keep_checkpoints=True)
    one = job(tmp_path / "one", device_count=1, engine_block=ENGINES[name], keep_checkpoints=True)
    run_training(two)
    run_training(one)
    assert final_loss(two.work_dir) == pytest.approx(final_loss(one.work_dir), rel=1e-5)
    halfway_two = checkpoint_dir(two.work_dir, 4)
    halfway_one = checkpoint_dir(one.work_dir, 4)
    to_one = job(
        tmp_path / "to_one", device_count=1, engine_block=ENGINES[name], resume_from=halfway_two
    )
    to_two = job(
        tmp_path / "to_two", device_count=2, engine_block=ENGINES[name], resume_from=halfway_one
    )
    run_training(to_one)
    run_training(to_two)
    for resumed in (to_one, to_two):
        logged = [entry["step"] for entry in history(resumed.work_dir)["train"]]
        assert logged == list(range(1, 9))  # steps 1-4 from the checkpoint, 5-8 trained
        assert final_loss(resumed.work_dir) == pytest.approx(final_loss(one.work_dir), rel=1e-5)


def test_a_killed_run_resumes_from_its_sharded_checkpoint_bitwise(tmp_path):
    """FSDP2 (sharded DCP checkpoints), dropout on (so every random generator matters): killed
    after the checkpoint of step 4, then rerun, it ends bit for bit where an uninterrupted run
    ends, with the same metric history."""
    from .training import kill_at

    fsdp2 = ENGINES["fsdp2"]
    uninterrupted = job(tmp_path / "u", engine_block=fsdp2, dropout=True)
    run_training(uninterrupted)
    killed = job(
        tmp_path / "k", engine_block=fsdp2, dropout=True, callbacks=[kill_at(6, 1, tmp_path / "f")]
    )
    with pytest.raises(Exception, match="rank 1 died: killed by SIGKILL"):
        run_training(killed)
    assert since_the_kill(tmp_path / "f") < 30  # noticed, not left to the collective timeout
    [step4] = complete_checkpoints(killed.work_dir)
    assert sorted(p.name for p in (step4 / "dcp_model").iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
    ]  # each rank wrote its own shard
    run_training(killed)  # the kill's marker file is there: trains through
    assert reproducible(history(killed.work_dir)) == reproducible(history(uninterrupted.work_dir))
    for key, value in weights(uninterrupted.work_dir).items():
        assert torch.equal(weights(killed.work_dir)[key], value), key


# --- Through `tango run`: the workspace, the parent process and its signals ---------------------


def tango(workspace: Path, overrides: dict, name: str, *extra: str) -> commands.Command:
    """`tango run` as a terminal's foreground job starts it: with SIGINT at its default, even
    when these tests run in a background job (tests/commands.py), its output in a file beside
    the workspace."""
    command = tango_command(EXPERIMENTS / "demo.jsonnet", workspace, name, overrides, *extra)
    return commands.start(command, workspace.parent / f"{name}.log")


def train(workspace: Path, overrides: dict, name: str) -> commands.Command:
    """`tango` of the demo's training step alone (`-s trained`, and the data it reads): the
    tests here are about that step; the evaluations and the report after it are not."""
    return tango(workspace, overrides, name, "-s", "trained")


def since_the_kill(fault_dir: Path) -> float:
    """Seconds since test::faults killed its rank (the marker it wrote just before): how long
    the failure took to be noticed, whatever a loaded machine spent before the kill."""
    return time.time() - (fault_dir / "killed").stat().st_mtime


def faulty_demo(pids: Path, **faults) -> dict:
    """The demo, tiny and with dropout on (so the random generators matter)."""
    from .training import TINY_WITH_DROPOUT

    return {
        "steps.data.task.sizes": {"train": 96, "validation": 24},
        "steps.trained.model.config": TINY_WITH_DROPOUT,
        "steps.eval_untrained.model.config": TINY_WITH_DROPOUT,
        "steps.trained.train_steps": 12,
        "steps.trained.validate_every": 4,
        "steps.trained.checkpoint_every": 4,
        "steps.trained.log_every": 1,
        "steps.trained.train_dataloader.batch_size": 4,
        "steps.trained.callbacks": [{"type": "test::faults", "pid_dir": str(pids), **faults}],
    }


def step_state(workspace: Path, step: str = "trained") -> str:
    from catwalk_steps.workspace.shared import SharedLocalWorkspace as LocalWorkspace

    ws = LocalWorkspace(workspace)
    [info] = [i for i in ws.search_step_info() if i.step_name == step]
    return info.state.value


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_a_killed_worker_fails_the_step_and_the_rerun_resumes(tmp_path):
    pids = tmp_path / "pids"
    overrides = faulty_demo(pids, kill_step=6)  # rank 1, after checkpoint 4, before 8
    first = train(tmp_path / "ws", overrides, "first")
    output, _ = first.communicate(timeout=120)
    assert first.returncode != 0, output
    assert since_the_kill(pids) < 30, output  # noticed, not left to the collective timeout
    assert "rank 1 died: killed by SIGKILL" in output
    assert "Traceback" not in output  # the survivor's traceback is in the run's log only
    assert step_state(tmp_path / "ws") == "failed"  # never shown completed
    assert not any(alive(int(p.read_text())) for p in pids.glob("rank*"))
    rerun = train(tmp_path / "ws", overrides, "rerun")
    output, _ = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, output
    assert "Resumed from" in output and "at step 4" in output
    # Bit-for-bit equality with an uninterrupted run (dropout on) is tested without `tango run`
    # above; here the rerun ends with the same history an uninterrupted run records.
    history = json.loads(
        (step_result(tmp_path / "ws", "rerun", "trained") / "catwalk_model.json").read_text()
    )["metrics_history"]
    assert [e["step"] for e in history["train"]] == list(range(1, 13))
    assert [v["step"] for v in history["validation"]] == [4, 8, 12]


def test_a_killed_fsdp2_worker_is_one_line_on_the_terminal(tmp_path):
    pids = tmp_path / "pids"
    overrides = {
        **faulty_demo(pids, kill_step=6),
        "steps.trained.training_engine.type": "catwalk::torch_fsdp",
    }
    first = train(tmp_path / "ws", overrides, "first")
    output, _ = first.communicate(timeout=120)
    assert first.returncode != 0, output
    errors = [line for line in output.splitlines() if " ERROR " in line]
    assert "WorkerFailed: rank 1 died: killed by SIGKILL" in errors[0], errors
    assert "Traceback" not in output
    log = next((tmp_path / "ws" / "runs" / "first").glob("out.log")).read_text()
    assert "Traceback" in log  # kept for whoever looks


def test_sigint_to_tango_alone_stops_its_workers_and_the_rerun_resumes(tmp_path):
    pids = tmp_path / "pids"
    overrides = faulty_demo(pids, hold_step=5)  # rank 1 held after checkpoint 4
    first = train(tmp_path / "ws", overrides, "first")
    deadline = time.monotonic() + 120
    while not (pids / "held").exists():  # rank 1 is held after checkpoint 4 (test::faults)
        assert time.monotonic() < deadline and first.poll() is None, "no checkpoint was written"
        time.sleep(0.2)
    workers = [int(p.read_text()) for p in pids.glob("rank*")]
    assert len(workers) == 2
    first.send_signal(signal.SIGINT)  # to the parent alone, as `kill -INT` does
    interrupted = time.monotonic()
    try:
        output, _ = first.communicate(timeout=60)
    finally:
        first.kill()  # a no-op once it has exited; else its workers die with it
    assert time.monotonic() - interrupted < 30
    assert first.returncode != 0
    assert not any(alive(pid) for pid in workers), output
    stopped = "training stopped; run the same command again to resume from its last checkpoint, "
    assert stopped + str(tmp_path / "ws") in output and "/checkpoints/step000000004" in output
    assert output.count(stopped) == 1  # said once (it was logged, then logged by Tango)
    assert step_state(tmp_path / "ws") == "failed"
    rerun = train(tmp_path / "ws", overrides, "rerun")
    output, _ = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, output
    assert "Resumed from" in output


def test_resume_from_another_run_older_or_finished_ends_where_an_uninterrupted_run_ends(tmp_path):
    """`resume_from` another run's older checkpoint trains from there to the end; from a
    finished run it trains nothing. Both results are the uninterrupted run's, byte for byte
    (their `best` used to name a checkpoint only the other run had: "no model weights", or
    "training ended without a checkpoint")."""
    overrides = {
        **faulty_demo(tmp_path / "pids"),
        "steps.trained.callbacks": [],
        "steps.trained.device_count": 1,
        # Validated at steps 8 and 12, and a learning rate at which 12 scores worse: the best
        # is step 8, so a run resumed from it must still have step 8 when it ends.
        "steps.trained.validate_every": 8,
        "steps.trained.training_engine.optimizer.lr": 0.1,
    }
    first = train(tmp_path / "a", overrides, "whole")
    assert first.wait(300) == 0, first.output()
    whole = step_result(tmp_path / "a", "whole", "trained")
    work_dir = next((tmp_path / "a" / "cache").glob("TrainRankClassifier-*/work"))
    assert (work_dir / "checkpoints" / "best").read_text().strip() == "step000000008"
    resumes = {
        "older": (checkpoint_dir(work_dir, 8), "at step 8"),
        "finished": (work_dir, "at step 12"),
    }
    started = {}
    for name, (source, _) in resumes.items():
        settings = {**overrides, "steps.trained.resume_from": str(source)}
        started[name] = train(tmp_path / name, settings, name)
    for name, command in started.items():
        assert command.wait(300) == 0, (name, command.output()[-4000:])
        output = command.output()
        assert f"Resumed from {resumes[name][0]}" in output and resumes[name][1] in output
        result = step_result(tmp_path / name, name, "trained")
        weights = (result / "model.safetensors").read_bytes()
        assert weights == (whole / "model.safetensors").read_bytes(), name  # the best: step 8
        assert losses(result) == losses(whole), name
        own = next((tmp_path / name / "cache").glob("TrainRankClassifier-*/work"))
        last = [load_file(checkpoint_dir(d, 12) / "model.pt") for d in (own, work_dir)]
        assert last[0].keys() == last[1].keys()
        assert all(torch.equal(last[0][k], last[1][k]) for k in last[0]), name


def losses(result: Path) -> list:
    """The training and validation losses a result's history holds, step by step."""
    history = json.loads((result / "catwalk_model.json").read_text())["metrics_history"]
    return [(e["step"], e.get("loss")) for e in history["train"] + history["validation"]]
