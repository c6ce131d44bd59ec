"""An evaluation on several nodes (`num_nodes`, as `catwalk::train`'s; the run itself, a lost
node and the resume: test_evaluation_resume.py): its bad keys fail in one line naming the key
when the step graph is built, in-process and through `tango run`."""

from __future__ import annotations

import json

import pytest
from tango.step_graph import StepGraph

from catwalk_steps.errors import one_line

from . import commands
from .commands import error_lines
from .conftest import TANGO_ENV, TINY_MODEL, tango_command

TASK = {"type": "catwalk::synthetic", "seed": 1, "sizes": {"validation": 8}}
NO_ADDRESS = (
    "ConfigurationError: evaluate.master_addr / evaluate.master_port: num_nodes > 1 needs node "
    "0's address and a port"
)
CASES = [
    (
        {"num_nodes": 0},
        "ConfigurationError: evaluate.num_nodes: must be a whole number >= 1, got 0",
    ),
    ({"num_nodes": 2}, NO_ADDRESS),
    ({"num_nodes": 2, "master_addr": "127.0.0.1"}, NO_ADDRESS),
    (
        {"num_nodes": 2, "rendezvous_timeout": 0},
        "ConfigurationError: evaluate.rendezvous_timeout: seconds > 0, got 0",
    ),
]


def steps(**settings) -> dict:
    step = {"type": "catwalk::evaluate", "model": TINY_MODEL, "task": TASK, **settings}
    return {"ev": step}


@pytest.mark.parametrize(("settings", "message"), CASES, ids=lambda v: str(v)[:50])
def test_a_bad_node_key_is_one_line_when_the_graph_is_built(settings, message, monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(Exception) as failure:
        StepGraph.from_params(steps(**settings))
    line = one_line(failure.value)
    assert line is not None and line.startswith(message), line or failure.value


@pytest.mark.slow
def test_through_tango_run_two_nodes_without_node_0_s_address_is_one_line(tmp_path):
    path = tmp_path / "nodes.jsonnet"
    path.write_text(json.dumps({"steps": steps(num_nodes=2)}))
    env = {k: v for k, v in TANGO_ENV.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    done = commands.run(tango_command(path, tmp_path / "ws", "nodes", None), 300, env=env)
    lines = error_lines(done.stdout + done.stderr)
    assert done.returncode == 1 and len(lines) == 1, lines or done.stdout[-3000:]
    assert NO_ADDRESS in lines[0] and 'Starting step "' not in done.stdout


@pytest.mark.parametrize(
    "said",
    [  # gloo's two wordings (torch 2.13), whichever side notices first
        "[/w/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:41344. This is "
        "typically caused by a remote worker crashing. Check the logs ... GLHF!",
        "[/w/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:11960: Connection reset by "
        "peer. This is typically caused by a remote worker hanging ... GLHF!",
    ],
)
def test_a_peer_lost_on_another_node_is_said_with_what_to_do(said):
    from types import SimpleNamespace

    from catwalk_steps.evaluation import EvaluationJob
    from catwalk_steps.launch.launcher import WorkerReport, failure

    job = SimpleNamespace(
        local_world_size=1,
        rendezvous=SimpleNamespace(num_nodes=2),
        AFTER_FAILURE=EvaluationJob.AFTER_FAILURE,
    )
    line = str(failure(job, 0, 0, [1], [WorkerReport(0, "builtins.RuntimeError", said, "")]))
    assert line.startswith("rank 0: a worker on another node is gone (that node was lost")
    assert "peer [127.0.0.1]:" in line and "GLHF" not in line
    assert line.endswith("run the step again: it scores only what the evaluation's records lack")
    job.rendezvous.num_nodes = 1  # one node: gloo's own words (a peer there is a local worker)
    line = str(failure(job, 0, 0, [1], [WorkerReport(0, "builtins.RuntimeError", said, "")]))
    assert line.startswith("rank 0: RuntimeError: [/w/gloo")
