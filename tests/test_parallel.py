"""`--parallelism N`: GPU leases that steps side by side never share (concurrent processes on
simulated GPUs; a SIGKILLed holder frees its devices; a step that waits says so in one line),
the line that says a node is too small for N steps, and a sweep run by warm slots."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from .conftest import EXPERIMENTS, REPO, TANGO_ENV, TINY_DEMO, run_tango
from .served import Served

pytestmark = [pytest.mark.slow]


def holder(
    tmp_path: Path,
    total: int,
    count: int,
    name: str,
    hold_s: float,
    go: Path | None = None,
    output: Path | None = None,
) -> Served:
    """A process that leases `count` of `total` simulated GPUs as `name` and holds them for
    `hold_s` (after `go` exists, when given); its output in `output`.out/.err."""
    env = {**TANGO_ENV, "CATWALK_LEASE_DIR": str(tmp_path / "leases")}
    argv = [str(total), str(count), name, str(hold_s), str(tmp_path / "held.jsonl")]
    if go is not None:
        argv.append(str(go))
    return Served("hold", argv, env, output or tmp_path / name.replace(" ", "_"))


def test_concurrent_holders_never_share_a_gpu(tmp_path):
    """6 holders of 2 of 4 GPUs, those that got theirs held until the other 4 say they wait:
    the overlap is forced, not left to how fast the processes start."""
    go = tmp_path / "go"
    outputs = [tmp_path / f"holder{i}" for i in range(6)]
    processes = [
        holder(tmp_path, 4, 2, f"step cell{i}", 0.1, go, out) for i, out in enumerate(outputs)
    ]

    def said(suffix: str, text: str) -> int:
        return sum(text in out.with_suffix(suffix).read_text() for out in outputs)

    deadline = time.monotonic() + 120
    try:
        while said(".out", "held") < 2 or said(".err", "waits for") < 4:
            assert said(".out", "held") <= 2  # 2 x 2 of 4 GPUs held, the others wait
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
            time.sleep(0.1)
    finally:
        go.touch()
    assert all(p.wait(60) == 0 for p in processes)
    errors = [out.with_suffix(".err").read_text() for out in outputs]
    held = [json.loads(line) for line in (tmp_path / "held.jsonl").read_text().splitlines()]
    assert len(held) == 6
    for a in held:
        assert len(set(a["indices"])) == 2
        for b in held:
            overlap = a is not b and a["start"] < b["end"] and b["start"] < a["end"]
            assert not (overlap and set(a["indices"]) & set(b["indices"])), (a, b)
    # Each of the 4 that waited said so once, in one line.
    waits = [e for e in errors if "waits for 2 of this node's 4 GPUs" in e]
    assert len(waits) == 4, errors
    assert all(e.count("waits for") == 1 and "\n" not in e.strip() for e in waits), waits


def test_a_killed_holder_frees_its_gpus(tmp_path):
    first = holder(tmp_path, 2, 2, "step first", 600)
    assert first.first_line(first.out) == "held"
    second = holder(tmp_path, 2, 2, "step second", 0)
    waiting = second.first_line(second.err)  # once it waits for first's GPUs
    assert waiting.startswith(
        f"step second waits for 2 of this node's 2 GPUs (held: simulated-gpu-0 by pid {first.pid} "
        "step first; simulated-gpu-1"
    ), waiting
    time.sleep(0.5)
    assert second.poll() is None
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    assert second.wait(10) == 0 and second.out.read_text().strip() == "held"


def test_a_lease_directory_others_can_write_is_refused(tmp_path, monkeypatch):
    from tango.common.exceptions import ConfigurationError

    from catwalk_steps.distributed.lease import lease_directory

    shared = tmp_path / "leases"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("CATWALK_LEASE_DIR", str(shared))
    with pytest.raises(ConfigurationError, match="others can write to it"):
        lease_directory()
    shared.chmod(0o700)
    assert lease_directory() == shared


class Step:
    def __init__(self, devices: int, device: str | None = None):
        from tango.step import StepResources

        self.resources = StepResources(gpu_count=devices)
        self.kwargs = {"device": device} if device else {}


def test_the_crowding_line_says_how_many_steps_wait(monkeypatch):
    from catwalk_steps.parallel import sizing

    monkeypatch.setenv("CATWALK_SIMULATED_GPUS", "4")
    cells = [Step(2), Step(2), Step(2), Step(0)]
    assert sizing.crowding_line(3, cells) == (
        "--parallelism 3: 3 steps take 2 GPUs each and this node has 4: 2 at a time, 1 waiting "
        "for devices"
    )
    assert sizing.crowding_line(2, cells) is None  # 2 x 2 GPUs fit
    # Steps that run CPU processes beside them, leasing none, are counted too.
    assert sizing.crowding_line(3, [*cells, Step(6), Step(1, "cpu")]) == (
        "--parallelism 3: 3 steps take 2 GPUs each and this node has 4: 2 at a time, 1 waiting "
        "for devices; 2 steps of up to 6 CPU processes run beside them, leasing no GPU "
        "(device_count above the node's 4 or device: cpu)"
    )
    assert sizing.crowding_line(3, [Step(2, "cpu")] * 3) is not None  # CPU processes: cores
    from catwalk_steps.engines import base

    monkeypatch.setattr(sizing, "usable_cores", lambda: 8)
    monkeypatch.setattr(base, "usable_cores", lambda: 8)  # the share of cores: slot_threads
    assert sizing.crowding_line(3, [Step(2, "cpu")] * 3) is None
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert sizing.slot_threads(3) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # asked for: at most the slot's share of 8
    assert sizing.slot_threads(3) == 2


def test_steps_side_by_side_wait_for_their_leased_gpus(tmp_path):
    """Through `tango run --parallelism 2`: two cells of 2 processes on 2 simulated GPUs run one
    after the other, the run says so at the start and the waiting step in one line each. The
    cell that leases first holds its GPUs (test::says) until the other says it waits: the
    overlap is forced, not left to how fast the slots start."""
    from . import commands
    from .conftest import tango_command

    env = {**TANGO_ENV, "CATWALK_SIMULATED_GPUS": "2", "CATWALK_LEASE_DIR": str(tmp_path / "l")}
    fixture = REPO / "tests" / "fixtures" / "sweep_leased.jsonnet"
    hold = tmp_path / "hold"
    hold.mkdir()
    says = [{"type": "test::says", "text": "training", "hold_dir": str(hold)}]
    overrides = {f"steps.trained,seed={seed}.callbacks": says for seed in (1, 2)}
    argv = tango_command(fixture, tmp_path / "ws", "leased", overrides, "--parallelism", "2")
    run = commands.start(argv, tmp_path / "out", env=env)
    deadline = time.monotonic() + 240
    try:
        while "waits for 2 of this node's 2 GPUs" not in run.output():
            assert run.poll() is None and time.monotonic() < deadline, run.output()[-3000:]
            time.sleep(0.2)
    finally:
        (hold / "go").touch()
    assert run.wait(300) == 0, run.output()[-3000:]
    output = run.output()
    assert (
        "--parallelism 2: 2 steps take 2 GPUs each and this node has 2: 1 at a time, 1 waiting "
        "for devices" in output
    )
    waits = [line for line in output.splitlines() if "waits for 2 of this node's 2 GPUs" in line]
    assert len(waits) == 1, output[-3000:]
    assert output.count("holds simulated GPUs 0, 1") == 2


def test_a_step_of_more_workers_than_gpus_says_it_leases_none(tmp_path):
    """The demo's `device_count: 2` on 1 simulated GPU with `--parallelism 2`: the training
    step's 2 CPU processes lease nothing (as on a node of one GPU) and say so when it starts,
    and the line at the start counts it beside the 2 evaluations that take the GPU in turn.
    Before, it trained beside an evaluation holding GPU 0 without a word."""
    env = {**TANGO_ENV, "CATWALK_SIMULATED_GPUS": "1", "CATWALK_LEASE_DIR": str(tmp_path / "l")}
    tiny = {**TINY_DEMO, "steps.trained.device_count": 2}
    tiny.update({f"steps.trained.{key}": 1 for key in STEP_COUNTS})
    output = run_tango(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "beside", tiny, env=env,
                       extra=("--parallelism", "2"))  # fmt: skip
    assert (
        "--parallelism 2: 2 steps take 1 GPU each and this node has 1: 1 at a time, 1 waiting "
        "for devices; 1 step of 2 CPU processes runs beside them, leasing no GPU (device_count "
        "above the node's 1)" in output
    ), output[-3000:]
    assert (
        "[step trained] device_count 2 exceeds the 1 simulated GPU: training on 2 CPU processes "
        "that lease none, beside the steps that hold them (set device_count: 1 to lease them)"
    ) in output
    assert "holds simulated GPU" not in "".join(
        line for line in output.splitlines() if "[step trained]" in line
    )
    assert output.count("holds simulated GPU 0") == 2  # each evaluation


def slot_processes(parent: int) -> list[int]:
    """The pids of `tango run`'s slot processes (forked from the worker server, each names
    itself `slot-<parent>`)."""
    found = []
    name = f"slot-{parent}"[:15]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm == name:
            found.append(int(entry.name))
    return found


STEP_COUNTS = ("train_steps", "validate_every", "checkpoint_every")


def held_cells(hold: Path, train_steps: int) -> dict:
    """Overrides of sweep_slow_cells: each cell trains `train_steps` and holds in its step (test::
    says) until `hold`/go exists, so a test can stop it mid-step however loaded the machine is."""
    says = [{"type": "test::says", "text": "cell holds", "hold_dir": str(hold)}]
    cells = [f"steps.trained,seed={seed}" for seed in (1, 2)]
    return {
        **{f"{cell}.callbacks": says for cell in cells},
        **{f"{cell}.{key}": train_steps for cell in cells for key in STEP_COUNTS},
    }


def test_a_slot_killed_mid_step_fails_that_step_and_the_rest_go_on(tmp_path):
    """Both cells hold in their training step (test::says) until the test has killed one's
    slot: the kill lands mid-step, not left to how fast the cells train."""
    from . import commands
    from .conftest import tango_command

    fixture = REPO / "tests" / "fixtures" / "sweep_slow_cells.jsonnet"
    hold = tmp_path / "hold"
    hold.mkdir()
    overrides = held_cells(hold, 4)
    argv = tango_command(fixture, tmp_path / "ws", "killed", overrides, "--parallelism", "2")
    run = commands.start(argv, tmp_path / "out")
    deadline = time.monotonic() + 120
    try:
        while run.output().count("cell holds") < 2:
            assert run.poll() is None and time.monotonic() < deadline, run.output()[-3000:]
            time.sleep(0.2)
        slots = slot_processes(run.pid)
        assert len(slots) == 2
        os.kill(slots[0], signal.SIGKILL)
    finally:
        (hold / "go").touch()
    assert run.wait(300) != 0
    output = run.output()
    lost = [line for line in output.splitlines() if "its slot process ended" in line]
    assert len(lost) == 1, output[-3000:]
    killed = lost[0].split("step ", 1)[1].split(":")[0]  # e.g. trained,seed=1
    survivor = "trained,seed=2" if killed == "trained,seed=1" else "trained,seed=1"
    assert f'Finished step "{survivor}"' in output
    assert f'Finished step "eval_{survivor}"' in output
    assert 'Finished step "eval_untrained' in output  # run by the slot left or a new one
    # The killed step's lock died with it: the same command trains that cell alone.
    again = run_tango(fixture, tmp_path / "ws", "again", overrides, extra=("--parallelism", "2"))
    assert again.count('Starting step "trained') == 1
    assert f'Starting step "{killed}"' in again


def test_a_step_failing_in_a_slot_is_one_line_on_the_terminal(tmp_path):
    """A step's error travels from its slot to `tango run`'s terminal as one line (Tango's
    exception records carried an object the terminal could not print: nothing was shown)."""
    from . import commands
    from .commands import error_lines
    from .conftest import TINY_MODEL, tango_command

    task = {"name": "gsm8k_gold_bpb_5shot", "max_instances": 4}
    experiment = tmp_path / "cut.jsonnet"
    step = {"type": "catwalk::evaluate", "model": TINY_MODEL, "task": task, "max_length": 8}
    experiment.write_text(json.dumps({"steps": {"ev": step}}))
    argv = tango_command(experiment, tmp_path / "ws", "cut", None, "--parallelism", "2")
    done = commands.run(argv, 300, env={**TANGO_ENV, "COLUMNS": "400"})
    output = done.stdout + done.stderr
    lines = error_lines(output)
    assert done.returncode == 1 and len(lines) == 1, lines or output[-3000:]
    assert (
        "TaskDataError: task 'gsm8k_gold_bpb_5shot': document 0's continuation is 123" in (lines[0])
    )
    assert "Exception occurred during processing of request" not in output


def test_a_slot_whose_parent_closed_its_pipe_stops_without_a_traceback():
    """Stopped while its step ended (Ctrl-C reached the step too late): `tango run` has closed
    the pipes, and the slot's last message finds no reader; it ends quietly (its step's state
    is in the workspace), not with a BrokenPipeError traceback on the terminal."""
    import multiprocessing

    from catwalk_steps.parallel.slot import send

    reader, writer = multiprocessing.Pipe(duplex=False)
    assert send(writer, {"ready": True})
    reader.close()
    assert not send(writer, {"finished": "trained", "ok": True, "model": None})
