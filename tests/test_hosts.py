"""Two hosts for real: node 0 (`tango run`) and node 1 (`catwalk-worker`) each in a network
namespace of its own with its own address (tests/hosts.py), meeting across a bridge, 2 CPU
processes each (gloo): what a cluster does where loopback hides it. Node 0's store must listen on
the address `master_addr` names and be reached from another; gloo must connect between hosts; a
host can vanish; a third host can reach the store's port and must get nothing run.

Skipped, with the reason, where namespaces cannot be made (not root, no `ip`).
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from . import commands
from .commands import error_lines
from .conftest import EXPERIMENTS, TANGO_ENV, step_result, tango_command
from .hosts import Hosts, hosts_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

DEMO = EXPERIMENTS / "demo.jsonnet"
T = "steps.trained"
PORT = 29533
SECOND_ADDRESS = "10.213.0.11"  # node 0's host has it too; the store must not listen on it
ENGINES = {
    "ddp": {"type": "catwalk::torch"},
    "fairscale": {"type": "catwalk::fairscale", "modules_to_wrap": ["transformer\\.h\\.[0-9]+"]},
    "fsdp2": {"type": "catwalk::torch_fsdp"},  # the model's own blocks
}


def training(engine: str, **extra) -> dict:
    """The demo, tiny: 8 steps (checkpoints at 4 and 8), 2 processes a node (4 in all),
    float32."""
    return {
        "steps.data.task.sizes": {"train": 64, "validation": 8},
        f"{T}.train_steps": 8,
        f"{T}.validate_every": 8,
        f"{T}.checkpoint_every": 4,
        f"{T}.log_every": 1,
        f"{T}.train_dataloader.batch_size": 2,
        f"{T}.training_engine.type": ENGINES[engine]["type"],
        **({f"{T}.training_engine.modules_to_wrap": ENGINES[engine]["modules_to_wrap"]}
           if "modules_to_wrap" in ENGINES[engine] else {}),
        **extra,
    }  # fmt: skip


def across(hosts: Hosts, settings: dict, timeout: float = 60) -> dict:
    """Two nodes of two processes, node 0 at host 0's address."""
    return {
        **settings,
        f"{T}.num_nodes": 2,
        f"{T}.device_count": 2,
        f"{T}.master_addr": hosts.addresses[0],
        f"{T}.master_port": PORT,
        f"{T}.rendezvous_timeout": timeout,
    }


def worker(overrides: dict, workspace: Path, *extra: str) -> list[str]:
    return [
        str(Path(sys.executable).with_name("catwalk-worker")),
        str(DEMO),
        *("--node-rank", "1", "-w", str(workspace), "-o", json.dumps(overrides), *extra),
        *("-i", "tests.training"),  # the tests' callbacks (test::faults), as node 0 has them
    ]


def weights(workspace: Path, run: str) -> dict[str, torch.Tensor]:
    return load_file(step_result(workspace, run, "trained") / "model.safetensors")


@pytest.fixture
def hosts():
    made = hosts_or_skip(3, extra_addresses={0: [SECOND_ADDRESS]})
    yield made
    made.close()


@pytest.fixture(scope="module")
def one_host(tmp_path_factory) -> dict[str, dict[str, torch.Tensor]]:
    """Each engine's weights after the same 8 steps on one host with 4 processes."""
    found = {}
    for engine in ENGINES:
        workspace = tmp_path_factory.mktemp(f"one_{engine}") / "ws"
        overrides = {**training(engine), f"{T}.device_count": 4}
        done = commands.run(tango_command(DEMO, workspace, "one", overrides), timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        found[engine] = weights(workspace, "one")
    return found


def equal_weights(mine: dict, theirs: dict) -> None:
    assert mine.keys() == theirs.keys()
    for name, tensor in mine.items():
        assert torch.allclose(tensor, theirs[name], rtol=1e-5, atol=1e-6), name


@pytest.mark.parametrize("engine", list(ENGINES))
def test_two_hosts_of_two_processes_train_as_one_host_of_four(tmp_path, hosts, one_host, engine):
    workspace = tmp_path / "ws"
    overrides = across(hosts, training(engine))
    node0 = hosts.start(0, tango_command(DEMO, workspace, "hosts", overrides), tmp_path / "0")
    node1 = hosts.start(1, worker(overrides, workspace), tmp_path / "1")
    assert node1.wait(300) == 0, node1.output()[-3000:]
    assert node0.wait(300) == 0, node0.output()[-3000:]
    assert "node 1: 2 CPU processes, ranks 2-3 of 4" in node1.output()
    equal_weights(weights(workspace, "hosts"), one_host[engine])
    assert hosts.left_behind() == []


def test_a_lost_host_stops_node_0_in_one_line_and_both_rerun_to_the_same_weights(tmp_path, hosts):
    """Node 1's host gone mid-run (every process in it killed, after checkpoint 4): node 0
    fails in one line within seconds, nothing is left on either host, and running both again
    resumes there and ends with the weights of an uninterrupted run, bit for bit. (One process
    a node: DDP rebuilds its gradient buckets on the first step after a resume, and with more
    than two ranks that can change the order an element's gradients are summed in, by 1e-6.)"""
    pids = tmp_path / "pids"
    callbacks = [{"type": "test::faults", "pid_dir": str(pids), "hold_step": 5, "rank": 1}]
    overrides = {**across(hosts, training("ddp")), f"{T}.device_count": 1}
    overrides[f"{T}.callbacks"] = callbacks
    reference = {**training("ddp"), f"{T}.device_count": 2}  # uninterrupted, on one host
    done = commands.run(tango_command(DEMO, tmp_path / "one", "one", reference), timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    workspace = tmp_path / "ws"
    node0 = hosts.start(0, tango_command(DEMO, workspace, "first", overrides), tmp_path / "0")
    node1 = hosts.start(1, worker(overrides, workspace), tmp_path / "1")
    deadline = time.monotonic() + 180
    while not (pids / "held").exists():  # rank 1 (node 1's) holds after checkpoint 4
        assert time.monotonic() < deadline and node0.poll() is None, node0.output()[-3000:]
        time.sleep(0.2)
    for pid in hosts.processes(1):  # the host is gone: every process of it
        os.kill(pid, 9)
    lost = time.monotonic()
    assert node0.wait(120) == 1
    assert time.monotonic() - lost < 60
    lines = error_lines(node0.output())
    assert len(lines) == 1 and "WorkerFailed: rank " in lines[0], lines or node0.output()[-3000:]
    node1.wait(30)
    assert hosts.left_behind() == []
    again = {**overrides, f"{T}.callbacks": callbacks}
    rerun0 = hosts.start(0, tango_command(DEMO, workspace, "again", again), tmp_path / "r0")
    rerun1 = hosts.start(1, worker(again, workspace), tmp_path / "r1")
    assert rerun1.wait(300) == 0, rerun1.output()[-3000:]
    assert rerun0.wait(300) == 0, rerun0.output()[-3000:]
    assert "Resumed from" in rerun0.output() and "at step 4" in rerun0.output()
    resumed, uninterrupted = weights(workspace, "again"), weights(tmp_path / "one", "one")
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)


class Payload:
    """Unpickling this runs `touch marker`."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_third_host_reaching_the_store_gets_nothing_run(tmp_path, hosts):
    """While node 0 waits for node 1: from a third host, a worker of another config and one
    without node 0's token are refused in one line, a pickle sent to the port runs nothing, and
    node 0's other address has no store; then the real node 1 joins and training ends."""
    workspace = tmp_path / "ws"
    overrides = across(hosts, training("ddp", **{f"{T}.train_steps": 4}), timeout=120)
    node0 = hosts.start(0, tango_command(DEMO, workspace, "first", overrides), tmp_path / "0")
    deadline = time.monotonic() + 120
    while "Waiting for 1 more node(s)" not in node0.output():
        assert time.monotonic() < deadline and node0.poll() is None, node0.output()[-3000:]
        time.sleep(0.2)
    other = {**overrides, f"{T}.train_steps": 5}
    elsewhere = tmp_path / "elsewhere"
    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    SharedLocalWorkspace(elsewhere)
    refused = {
        "another config": (worker(other, workspace), "ConfigurationError: "),
        "no token": (worker(overrides, elsewhere), "RendezvousError: "),
    }
    for name, (argv, kind) in refused.items():
        done = hosts.run(2, argv)
        assert done.returncode == 1, (name, done.stderr[-2000:])
        assert len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
        assert done.stderr.startswith(f"catwalk-worker: {kind}"), (name, done.stderr)
    marker = tmp_path / "store unpickled"
    probe = (
        "import socket, sys; s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5);"
        "s.sendall(open(sys.argv[3], 'rb').read()); s.settimeout(3)\n"
        "try: s.recv(100)\nexcept OSError: pass"
    )
    payload = tmp_path / "payload"
    payload.write_bytes(pickle.dumps(Payload(marker)) * 8)
    script = [sys.executable, "-c", probe, hosts.addresses[0], str(PORT), str(payload)]
    subprocess_run(hosts.command(2, script))
    assert not marker.exists()
    unreached = [sys.executable, "-c", probe, SECOND_ADDRESS, str(PORT), str(payload)]
    assert subprocess_run(hosts.command(2, unreached)).returncode != 0  # connection refused
    node1 = hosts.start(1, worker(overrides, workspace), tmp_path / "1")
    assert node1.wait(300) == 0, node1.output()[-3000:]
    assert node0.wait(300) == 0, node0.output()[-3000:]
    assert not marker.exists()


def subprocess_run(argv: list[str]):
    import subprocess

    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=TANGO_ENV)


def test_a_worker_started_before_node_0_waits_and_joins(tmp_path, hosts):
    workspace = tmp_path / "ws"
    overrides = across(hosts, training("ddp", **{f"{T}.train_steps": 4}))
    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    SharedLocalWorkspace(workspace)
    node1 = hosts.start(1, worker(overrides, workspace, "--timeout", "90"), tmp_path / "1")
    deadline = time.monotonic() + 120
    # node 1 is up and asking, refused twice: nothing listens at node 0's address yet
    while refused_connects(hosts, 1, node1.pid) < 2:
        assert time.monotonic() < deadline and node1.poll() is None, node1.output()
        time.sleep(0.2)
    assert node1.poll() is None, node1.output()
    with socket.socket() as check:  # the worker's probes reach nothing from here either
        check.settimeout(1)
        assert check.connect_ex(("127.0.0.1", PORT)) != 0
    node0 = hosts.start(0, tango_command(DEMO, workspace, "late", overrides), tmp_path / "0")
    assert node0.wait(300) == 0, node0.output()[-3000:]
    assert node1.wait(120) == 0, node1.output()[-3000:]


def refused_connects(hosts: Hosts, host: int, pid: int) -> int:
    """The TCP connections refused so far on host `host` (its namespace's Tcp AttemptFails, as
    process `pid` sees them; on host 1 only the worker connects anywhere); 0 until `pid` has
    joined that host's namespace (a forked command enters it after it starts)."""
    try:
        theirs = os.stat(f"/var/run/netns/{hosts.names[host]}").st_ino
        if os.stat(f"/proc/{pid}/ns/net").st_ino != theirs:
            return 0
        lines = [line.split() for line in Path(f"/proc/{pid}/net/snmp").read_text().splitlines()]
    except OSError:
        return 0
    names, values = (line for line in lines if line[0] == "Tcp:")
    return int(values[names.index("AttemptFails")])
