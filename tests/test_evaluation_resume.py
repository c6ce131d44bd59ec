"""An evaluation stopped halfway (SIGKILL, Ctrl-C, a killed worker, a node lost from an
evaluation on two nodes) and run again scores only what its records lack, and ends with the
uninterrupted run's result, byte for byte; records of other weights or other settings are never
used, and a damaged or planted record costs its chunk and runs nothing. Through `tango run` (and
`catwalk-worker`), as a user would (catwalk_steps/evaluation/journal.py)."""

from __future__ import annotations

import json
import pickle
import shutil
import sys
import time
from pathlib import Path

import pytest

from . import commands
from .commands import error_lines
from .conftest import TANGO_ENV, TINY_MODEL, step_result, tango_command

pytestmark = [pytest.mark.slow]

# 96 requests of 4 choices scored 3 sequences a batch: a chunk is 16 requests, 6 chunks.
TASK = {"type": "catwalk::synthetic", "seed": 1, "sizes": {"validation": 96}}
CHUNKS = 6


def experiment(tmp_path: Path, **settings) -> Path:
    step = {"type": "catwalk::evaluate", "model": TINY_MODEL, "task": TASK, "batch_size": 3}
    path = tmp_path / f"ev{len(list(tmp_path.glob('ev*.jsonnet')))}.jsonnet"
    path.write_text(json.dumps({"steps": {"ev": {**step, **settings}}}))
    return path


def run(path: Path, workspace: Path, name: str, log: Path, **faults: str):
    argv = tango_command(path, workspace, name, None, "-i", "tests.evaluation_faults")
    env = {**TANGO_ENV, "CATWALK_TEST_CHUNKS_LOG": str(log), **faults}
    done = commands.run(argv, 600, env=env)
    return done.returncode, done.stdout + done.stderr


def scored(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def records(workspace: Path) -> list[Path]:
    return sorted(workspace.glob("cache/Evaluate-*/work/answers/*/chunk-*.json"))


def result_bytes(workspace: Path, name: str) -> bytes:
    return (step_result(workspace, name, "ev") / "data.json").read_bytes()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, bytes]:
    """The result of each setting scored without a stop (one run, a step each)."""
    tmp = tmp_path_factory.mktemp("whole")
    step = json.loads(experiment(tmp).read_text())["steps"]["ev"]
    path = tmp / "both.jsonnet"
    path.write_text(json.dumps({"steps": {"one": step, "two": {**step, "device_count": 2}}}))
    workspace, log = tmp / "ws", tmp / "whole.log"
    rc, output = run(path, workspace, "whole", log)
    assert rc == 0, output[-3000:]
    assert scored(log) == 2 * CHUNKS and not records(workspace)  # removed with success
    return {
        label: (step_result(workspace, "whole", label) / "data.json").read_bytes()
        for label in ("one", "two")
    }


def test_a_killed_evaluation_scores_only_what_its_records_lack_and_ends_byte_for_byte(
    tmp_path, uninterrupted
):
    """Killed after 3 of 6 chunks; of those records one is cut and one replaced by a pickle:
    each costs its chunk (one line names it), runs nothing, and the result is the
    uninterrupted run's."""
    path, workspace = experiment(tmp_path), tmp_path / "ws"
    stop = {"CATWALK_TEST_STOP_AFTER_CHUNKS": "3"}
    rc, output = run(path, workspace, "stopped", tmp_path / "first.log", **stop)
    assert rc != 0 and len(records(workspace)) == 3, output[-3000:]
    cut, planted, _ = records(workspace)
    cut.write_bytes(cut.read_bytes()[:40])
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    planted.write_bytes(pickle.dumps(Payload()))
    again = tmp_path / "again.log"
    rc, output = run(path, workspace, "again", again)
    assert rc == 0, output[-3000:]
    assert not marker.exists()
    assert scored(again) == CHUNKS - 1  # all but the one whole record
    assert "16 of 96 requests were scored by an earlier attempt" in output
    for damaged in (cut, planted):
        assert f"{damaged}: not read, scored again" in output
    assert result_bytes(workspace, "again") == uninterrupted["one"]


def test_ctrl_c_says_the_rerun_resumes_and_it_does(tmp_path, uninterrupted):
    path, workspace = experiment(tmp_path), tmp_path / "ws"
    first = tmp_path / "first.log"
    stop = {"CATWALK_TEST_STOP_AFTER_CHUNKS": "2", "CATWALK_TEST_STOP_SIGNAL": "SIGINT"}
    rc, output = run(path, workspace, "stopped", first, **stop)
    assert rc != 0 and scored(first) == 2 and len(records(workspace)) == 2, output[-3000:]
    lines = error_lines(output)
    assert len(lines) == 1 and "EvaluationStopped" in lines[0], lines or output[-3000:]
    assert "scores only what the evaluation's records lack" in lines[0]
    # Another device count is another step (docs/evaluation/resume.md): scored from the start.
    other = tmp_path / "other.log"
    rc, output = run(experiment(tmp_path, device_count=2), workspace, "other", other)
    assert rc == 0 and scored(other) == CHUNKS and "earlier attempt" not in output
    again = tmp_path / "again.log"
    rc, output = run(path, workspace, "again", again)
    assert rc == 0, output[-3000:]
    assert scored(again) == CHUNKS - 2  # only the missing chunks
    assert "32 of 96 requests were scored by an earlier attempt" in output
    assert result_bytes(workspace, "again") == uninterrupted["one"]


def test_a_killed_worker_s_rerun_scores_what_the_workers_had_not_recorded(tmp_path, uninterrupted):
    path, workspace = experiment(tmp_path, device_count=2), tmp_path / "ws"
    first = tmp_path / "first.log"
    rc, output = run(path, workspace, "killed", first, CATWALK_TEST_STOP_AFTER_CHUNKS="1")
    assert rc != 0, output[-3000:]
    lines = error_lines(output)
    assert len(lines) == 1 and "scores only what the evaluation's records lack" in lines[0]
    kept = len(records(workspace))
    assert 1 <= kept < CHUNKS
    again = tmp_path / "again.log"
    rc, output = run(path, workspace, "again", again)
    assert rc == 0, output[-3000:]
    assert scored(again) == CHUNKS - kept
    assert result_bytes(workspace, "again") == uninterrupted["two"]


def two_nodes(tmp_path: Path, workspace: Path, name: str, log: Path, **faults: str) -> tuple:
    """The step on two one-process nodes meeting on localhost: node 0 `tango run`, node 1
    `catwalk-worker` (`faults` on node 1 only; each node counts its own chunks)."""
    from catwalk_steps.distributed.rendezvous import free_port

    nodes = {"num_nodes": 2, "master_addr": "127.0.0.1", "master_port": free_port()}
    path = experiment(tmp_path, **nodes, rendezvous_timeout=60)
    env = {**TANGO_ENV, "CATWALK_TEST_CHUNKS_LOG": str(log)}
    node0 = commands.start(
        tango_command(path, workspace, name, None, "-i", "tests.evaluation_faults"),
        tmp_path / f"{name}-0.out",
        env=env,
    )
    worker = [str(Path(sys.executable).with_name("catwalk-worker")), str(path), "--step", "ev"]
    worker += ["--node-rank", "1", "--timeout", "60", "-w", str(workspace)]
    node1_log = log.with_suffix(".node1")
    node1 = commands.start(
        [*worker, "-i", "tests.evaluation_faults"],
        tmp_path / f"{name}-1.out",
        env={**env, "CATWALK_TEST_CHUNKS_LOG": str(node1_log), **faults},
    )
    return node0, node1, node1_log


def test_a_lost_node_stops_a_two_node_evaluation_in_one_line_and_the_rerun_resumes(
    tmp_path, uninterrupted
):
    """Node 1 is lost (its launcher SIGKILLed, its worker dying with it) after recording one
    chunk: node 0 stops in one line; both nodes run again and score only what the records lack,
    and the result is the uninterrupted 2-process run's, byte for byte."""
    workspace = tmp_path / "ws"
    hold = {"CATWALK_TEST_STOP_AFTER_CHUNKS": "1", "CATWALK_TEST_STOP_SIGNAL": "hold"}
    node0, node1, node1_log = two_nodes(tmp_path, workspace, "lost", tmp_path / "lost.log", **hold)
    deadline = time.monotonic() + 240
    while scored(node1_log) < 1:
        assert time.monotonic() < deadline and node1.poll() is None, node1.output()[-3000:]
        time.sleep(0.2)
    node1.kill()  # the whole node goes away (its worker dies with its launcher)
    output, _ = node0.communicate(timeout=240)
    assert node0.returncode != 0, output[-3000:]
    lines = error_lines(output)
    assert len(lines) == 1 and "a worker on another node is gone" in lines[0], lines or output
    assert "run the step again: it scores only what the evaluation's records lack" in lines[0]
    kept = len(records(workspace))
    assert 1 <= kept < CHUNKS, output[-3000:]
    again = tmp_path / "again.log"
    node0, node1, node1_log = two_nodes(tmp_path, workspace, "again", again)
    output, _ = node0.communicate(timeout=240)
    node1.wait(timeout=60)
    assert node0.returncode == 0 and node1.returncode == 0, (output[-3000:], node1.output())
    assert scored(again) + scored(node1_log) == CHUNKS - kept  # only what was missing
    assert f"{16 * kept} of 96 requests were scored by an earlier attempt" in output
    assert result_bytes(workspace, "again") == uninterrupted["two"]


def test_records_of_other_weights_are_never_used(tmp_path):
    """A local model directory whose weights change between the stop and the rerun (the same
    step: its path did not change) is scored whole again."""
    from catwalk_steps.scoring.rank_classifier import RankClassifier

    from .conftest import TINY_GPT2

    directory = tmp_path / "model"
    spec = {"config": TINY_GPT2, "tokenizer": "catwalk::byte_level"}
    RankClassifier(**spec, init_seed=1).save_pretrained(directory)
    block = {"type": "catwalk::rank_classifier", "pretrained": str(directory)}
    path, workspace = experiment(tmp_path, model=block), tmp_path / "ws"
    stop = {"CATWALK_TEST_STOP_AFTER_CHUNKS": "2"}
    rc, output = run(path, workspace, "stopped", tmp_path / "first.log", **stop)
    assert rc != 0 and len(records(workspace)) == 2, output[-3000:]
    shutil.rmtree(directory)
    RankClassifier(**spec, init_seed=2).save_pretrained(directory)
    again = tmp_path / "again.log"
    rc, output = run(path, workspace, "again", again)
    assert rc == 0, output[-3000:]
    assert scored(again) == CHUNKS and "earlier attempt" not in output


def test_an_edited_chunk_is_scored_again_and_the_resume_is_said_at_the_default_level(
    tmp_path, uninterrupted
):
    """A chunk whose answers were edited after it was written (still answers of its kind) is
    one line naming it, and is scored again: the edited numbers never reach the result. The
    rerun, at `tango run`'s default log level, says it resumes (as resumed training does)."""
    path, workspace = experiment(tmp_path), tmp_path / "ws"
    rc, output = run(
        path, workspace, "stopped", tmp_path / "first.log", CATWALK_TEST_STOP_AFTER_CHUNKS="2"
    )
    assert rc != 0 and len(records(workspace)) == 2, output[-3000:]
    edited, _ = records(workspace)
    record = json.loads(edited.read_text())
    for answer in record["answers"]:  # every first choice now the likeliest
        answer[0] = 0.0
    edited.write_text(json.dumps(record))
    argv = tango_command(path, workspace, "again", None, "-i", "tests.evaluation_faults")
    at_default = argv[:1] + argv[3:]
    assert argv[1:3] == ["--log-level", "info"] and "--log-level" not in at_default
    again = tmp_path / "again.log"
    done = commands.run(at_default, 600, env={**TANGO_ENV, "CATWALK_TEST_CHUNKS_LOG": str(again)})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert f"{edited}: not read, scored again (changed since it was written" in output
    assert "Resuming the evaluation: 16 of 96 requests were scored by an earlier attempt" in output
    assert scored(again) == CHUNKS - 1
    assert result_bytes(workspace, "again") == uninterrupted["one"]
