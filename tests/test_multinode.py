"""Several nodes, simulated on this machine: node 0 runs `tango run`, node 1 `catwalk-worker`,
one CPU process each (gloo), meeting at a rendezvous port on localhost (across network
namespaces, as separate hosts: tests/test_hosts.py)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from catwalk_steps.distributed.rendezvous import free_port

from . import commands
from .conftest import EXPERIMENTS, PARITY, history, tango_command
from .hosts import cannot_make_hosts

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

# Where network namespaces can be made (root, as CI runs), the same runs go across two real
# hosts (tests/test_hosts.py); these loopback ones stand in where they cannot.
across_hosts = pytest.mark.skipif(
    cannot_make_hosts() is None,
    reason="covered across network namespaces (tests/test_hosts.py)",
)


def two_nodes(port: int, step: str = "trained", **extra) -> dict:
    prefix = f"steps.{step}"
    return {
        f"{prefix}.num_nodes": 2,
        f"{prefix}.device_count": 1,
        f"{prefix}.master_addr": "127.0.0.1",
        f"{prefix}.master_port": port,
        **extra,
    }


class Node:
    """A node's command, its output in a file (tests/commands.py)."""

    def __init__(self, command: list[str], log: Path):
        self.log = log
        self.process = commands.start(command, log)

    def finish(self, timeout: float = 180) -> str:
        try:
            self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        return self.log.read_text()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode


def start(command: list[str], log: Path) -> Node:
    return Node(command, log)


def worker_node(
    experiment: Path, overrides: dict, log: Path, workspace: Path, step: str = "trained"
) -> Node:
    import json

    command = [
        str(Path(sys.executable).with_name("catwalk-worker")),
        str(experiment),
        "--step",
        step,
        "--node-rank",
        "1",
        "--timeout",
        "60",
        "-o",
        json.dumps(overrides),
        "-i",
        "tests.training",
        "-w",
        str(workspace),
    ]
    return start(command, log)


@across_hosts
@pytest.mark.parametrize("engine", ["ddp", "fsdp_wrapped", "fsdp2_wrapped"])
def test_two_nodes_train_like_two_processes_on_one_node(tmp_path, parity_run, engine):
    """The parity fixture's steps (2 processes, 8 instances each) on two one-process nodes:
    DDP, FairScale FSDP and FSDP2, blocks wrapped."""
    port = free_port()  # node 0 binds it; the test must know it in advance, as a cluster does
    step = f"steps.{engine}"
    overrides = two_nodes(
        port,
        engine,
        **{f"{step}.train_dataloader.batch_size": 8, f"{step}.rendezvous_timeout": 60},
    )
    workspace = tmp_path / "ws"
    node0 = start(
        tango_command(PARITY, workspace, "nodes", overrides, "-s", engine), tmp_path / "0"
    )
    node1 = worker_node(PARITY, overrides, tmp_path / "1", workspace, step=engine)
    output1, output0 = node1.finish(), node0.finish()
    assert node0.returncode == 0, output0[-3000:]
    assert node1.returncode == 0, output1[-3000:]
    assert "node 1: 1 CPU process, ranks 1-1 of 2" in output1
    nodes, single = history(workspace, "nodes", engine), history(parity_run, "parity", engine)
    for mine, theirs in zip(nodes["train"], single["train"], strict=True):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-5), mine["step"]
    for mine, theirs in zip(nodes["validation"], single["validation"], strict=True):
        assert (mine["count"], mine["acc"]) == (theirs["count"], theirs["acc"])
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-5)
    assert nodes["tasks"] == single["tasks"]  # in-loop task scores, each node a share
    if engine != "ddp":
        return
    # Cached once: node 0 alone finds the result (the rendezvous keys are not in the cache key).
    again = start(
        tango_command(PARITY, workspace, "again", overrides, "-s", engine), tmp_path / "a"
    )
    output = again.finish()
    assert again.returncode == 0 and f'Found output for step "{engine}" in cache' in output
    assert len(list(workspace.glob("cache/TrainRankClassifier-*"))) == 1


def tiny_demo(port: int, **extra) -> dict:
    return two_nodes(
        port,
        **{
            "steps.data.task.sizes": {"train": 96, "validation": 24},
            "steps.trained.train_steps": 12,
            "steps.trained.validate_every": 4,
            "steps.trained.checkpoint_every": 4,
            "steps.trained.train_dataloader.batch_size": 4,
            "steps.trained.rendezvous_timeout": 60,
            **extra,
        },
    )


def test_a_node_that_never_arrives_fails_within_the_timeout(tmp_path):
    port = free_port()
    overrides = tiny_demo(port, **{"steps.trained.rendezvous_timeout": 3})
    started = time.monotonic()
    command = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "alone", overrides)
    node0 = start(command, tmp_path / "0")
    output = node0.finish(timeout=120)
    assert node0.returncode != 0
    assert time.monotonic() - started < 60
    assert (
        f"rendezvous at 127.0.0.1:{port}: node 1 (rank 1) did not join within 3 s "
        "(rendezvous_timeout)" in output
    )


@across_hosts
def test_killing_the_worker_node_stops_node_0_and_a_rerun_of_both_resumes(tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    callbacks = [{"type": "test::faults", "pid_dir": str(pids), "hold_step": 5}]  # after ckpt 4
    overrides = tiny_demo(port, **{"steps.trained.callbacks": callbacks})
    experiment = EXPERIMENTS / "demo.jsonnet"
    node0 = start(tango_command(experiment, tmp_path / "ws", "first", overrides), tmp_path / "0")
    node1 = worker_node(experiment, overrides, tmp_path / "1", tmp_path / "ws")
    deadline = time.monotonic() + 120
    while not (pids / "held").exists():  # rank 1 is held after checkpoint 4 (test::faults)
        alive = node0.process.poll() is None
        assert time.monotonic() < deadline and alive, "no checkpoint was written"
        time.sleep(0.2)
    node1.process.send_signal(signal.SIGKILL)  # the whole worker node goes away
    killed = time.monotonic()
    output = node0.finish(timeout=120)
    node1.finish()
    assert node0.returncode != 0
    assert time.monotonic() - killed < 60, output[-2000:]
    rerun0 = start(tango_command(experiment, tmp_path / "ws", "rerun", overrides), tmp_path / "r0")
    rerun1 = worker_node(experiment, overrides, tmp_path / "r1", tmp_path / "ws")
    output1, output0 = rerun1.finish(), rerun0.finish()
    assert rerun0.returncode == 0, output0[-3000:]
    assert rerun1.returncode == 0, output1[-3000:]
    assert "Resumed from" in output0


def test_two_nodes_train_on_a_generative_task(tmp_path):
    """Node 1 checks the data it reads against node 0's checksum: the data as loaded (the
    training form of a generative split is made by each worker, not published)."""
    import json

    from .conftest import experiment_params

    steps = experiment_params(EXPERIMENTS / "generation_demo.jsonnet")["steps"]
    trained = {**steps["trained"], "evaluate_tasks": [], "train_steps": 4}
    trained.update(validate_every=2, checkpoint_every=2)
    task = {**steps["data"]["task"], "sizes": {"train": 32, "validation": 4}}
    data = {**steps["data"], "task": task}
    experiment = tmp_path / "generative.json"
    experiment.write_text(json.dumps({"steps": {"data": data, "trained": trained}}))
    overrides = two_nodes(free_port())
    workspace = tmp_path / "ws"
    node0 = start(tango_command(experiment, workspace, "nodes", overrides), tmp_path / "0")
    node1 = worker_node(experiment, overrides, tmp_path / "1", workspace)
    out0, out1 = node0.finish(), node1.finish()
    assert node0.returncode == 0 and node1.returncode == 0, (out0[-3000:], out1[-3000:])
    validation = history(workspace, "nodes", "trained")["validation"]
    assert [v["step"] for v in validation] == [2, 4]
    assert all("exact_match,remove_whitespace" in v for v in validation)
