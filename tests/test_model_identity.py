"""A result's identity includes the content of a local model directory it depends on: weights
replaced in place are another step, scored (or trained) again, never the old result; an unchanged
directory stays the same step, its files hashed once while they are unchanged, whichever
process builds the step graph (catwalk_steps/file_digests.py, the user's record of digests)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from catwalk_steps import file_digests
from catwalk_steps.file_digests import RECORD

from . import commands
from .conftest import EXPERIMENTS, REPO, TANGO_ENV, experiment_params, step_result, tango_command

DEMO_GPT2 = {  # experiments/demo.jsonnet's model: its experiment's other steps fit it
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 4,
    "n_positions": 128,
    "activation_function": "gelu_pytorch_tanh",
}


def save_model(directory: Path, seed: int) -> None:
    """A tiny model directory (config, safetensors, tokenizer), replaced in place: the same path."""
    from catwalk_steps.scoring.rank_classifier import RankClassifier

    spec = {"config": DEMO_GPT2, "tokenizer": "catwalk::byte_level"}
    RankClassifier(**spec, init_seed=seed).save_pretrained(directory)


@pytest.fixture
def record_home(tmp_path, monkeypatch) -> Path:
    """This test's XDG_CACHE_HOME, and a fresh process's memory of digests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(file_digests, "_known", {})
    monkeypatch.setattr(file_digests, "_said", [])
    return tmp_path / "xdg" / "catwalk_steps"


def hashes_counted(monkeypatch) -> list[str]:
    counted: list[str] = []
    hashed = file_digests.hashed

    def counting(real, key):
        counted.append(real)
        return hashed(real, key)

    monkeypatch.setattr(file_digests, "hashed", counting)
    return counted


def as_new_process(monkeypatch) -> None:
    monkeypatch.setattr(file_digests, "_known", {})


def test_a_file_is_hashed_once_while_it_is_unchanged_whichever_process_asks(
    tmp_path, record_home, monkeypatch
):
    monkeypatch.setattr(file_digests, "RACY_NS", 0)  # (a file just written is not recorded)
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"a" * 1000)
    counted = hashes_counted(monkeypatch)
    expected = hashlib.sha256(b"a" * 1000).hexdigest()
    assert file_digests.file_digests([path]) == [expected]
    as_new_process(monkeypatch)
    assert file_digests.file_digests([path]) == [expected] and len(counted) == 1
    record = record_home / RECORD
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(record_home.stat().st_mode) == 0o700
    assert json.loads(record.read_text())["files"][str(path.resolve())]["sha256"] == expected


def test_a_file_rewritten_in_place_with_its_size_and_mtime_kept_is_hashed_again(
    tmp_path, record_home, monkeypatch
):
    """`touch -d` / `cp -p` keep the modification time; the change time moves regardless."""
    monkeypatch.setattr(file_digests, "RACY_NS", 0)
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"a" * 1000)
    before = path.stat()
    assert file_digests.file_digests([path]) == [hashlib.sha256(b"a" * 1000).hexdigest()]
    time.sleep(0.01)
    with open(path, "r+b") as f:  # the same inode, the same size
        f.write(b"b" * 1000)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    as_new_process(monkeypatch)
    assert file_digests.file_digests([path]) == [hashlib.sha256(b"b" * 1000).hexdigest()]


def test_a_file_changed_moments_before_it_was_hashed_is_not_recorded(
    tmp_path, record_home, monkeypatch
):
    """It may change again within one tick of the clock without its times moving (git's
    "racily clean" files): its digest serves this process only."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"a" * 1000)
    counted = hashes_counted(monkeypatch)
    file_digests.file_digests([path])
    as_new_process(monkeypatch)
    file_digests.file_digests([path])
    assert len(counted) == 2 and not (record_home / RECORD).exists()


@pytest.mark.parametrize("damage", ["not json", "another shape", "an entry of another shape"])
def test_a_damaged_record_is_ignored_and_written_afresh(tmp_path, record_home, monkeypatch, damage):
    monkeypatch.setattr(file_digests, "RACY_NS", 0)
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"a" * 1000)
    record_home.mkdir(parents=True, mode=0o700)
    real, key = str(path.resolve()), list(file_digests.stat_key(path.stat()))
    text = {
        "not json": "{cut",
        "another shape": json.dumps({"version": 1, "files": [real]}),
        "an entry of another shape": json.dumps(  # its file's stat, but no SHA-256
            {"version": 1, "files": {real: {"stat": key, "sha256": "not a digest"}}}
        ),
    }[damage]
    (record_home / RECORD).write_text(text)
    (record_home / RECORD).chmod(0o600)
    assert file_digests.file_digests([path]) == [hashlib.sha256(b"a" * 1000).hexdigest()]
    files = json.loads((record_home / RECORD).read_text())["files"]
    assert files[real]["sha256"] == hashlib.sha256(b"a" * 1000).hexdigest()


@pytest.mark.parametrize("shared", ["directory", "record"])
def test_a_record_others_may_write_is_never_read(
    tmp_path, record_home, monkeypatch, shared, caplog
):
    """A digest planted there would make a changed file look unchanged."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"a" * 1000)
    record_home.mkdir(parents=True, mode=0o700)
    key = list(file_digests.stat_key(path.stat()))
    planted = {"version": 1, "files": {str(path.resolve()): {"stat": key, "sha256": "0" * 64}}}
    (record_home / RECORD).write_text(json.dumps(planted))
    (record_home / RECORD).chmod(0o600)
    # As this user's own, the record is believed (what the test below relies on)...
    assert file_digests.file_digests([path]) == ["0" * 64]
    as_new_process(monkeypatch)
    (record_home if shared == "directory" else record_home / RECORD).chmod(0o777)
    assert file_digests.file_digests([path]) == [hashlib.sha256(b"a" * 1000).hexdigest()]
    assert "not a " in caplog.text and "this user's alone" in caplog.text


def test_a_directory_s_content_is_its_files_but_not_hidden_ones(tmp_path, record_home):
    """A file in a folder counts (a trained model's `adapter/`); a clone's `.git` or a
    download's `.cache`, which no loader reads, do not (a `git fetch` is not new weights)."""
    from catwalk_steps.checkpoints.base_identity import directory_digest

    (tmp_path / "adapter").mkdir()
    (tmp_path / "model.safetensors").write_bytes(b"w")
    (tmp_path / "adapter" / "adapter_model.safetensors").write_bytes(b"a")
    first = directory_digest(tmp_path)
    for hidden in (".git/FETCH_HEAD", ".cache/huggingface/download.lock", ".notes"):
        (tmp_path / hidden).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / hidden).write_text("changed")
    assert directory_digest(tmp_path) == first
    (tmp_path / "adapter" / "adapter_model.safetensors").write_bytes(b"b")
    assert directory_digest(tmp_path) != first


# Steps that read a model directory: evaluate, the DPO reference, train (its block's
# `pretrained`, and `init_from`), and the steps after them.
DEPENDENT = {
    "eval_untrained",
    "eval_trained",
    "trained",
    "report",
    "init_trained",
    "dpo_reference",
    "dpo_trained",
    "dpo_eval_before",
    "dpo_eval_after",
    "dpo_report",
    "grpo_reference_directory",
    "grpo_reference_block",
}


def graph_ids(directory: Path) -> dict[str, str]:
    """The unique ids of demo.jsonnet and the tiny DPO run with every model block reading a
    local directory, and a training step starting from it (`init_from`), as the graph is built."""
    from tango.step_graph import StepGraph

    def reading(block: dict) -> dict:
        return {**{k: v for k, v in block.items() if k != "config"}, "pretrained": str(directory)}

    demo = experiment_params(EXPERIMENTS / "demo.jsonnet")["steps"]
    demo["init_trained"] = {**demo["trained"], "init_from": str(directory)}
    for name in ("trained", "eval_untrained"):
        demo[name]["model"] = reading(demo[name]["model"])
    dpo = experiment_params(REPO / "tests" / "fixtures" / "dpo_tiny.jsonnet")["steps"]
    for name in ("dpo_reference", "dpo_trained", "dpo_eval_before"):
        dpo[name]["model"] = reading(dpo[name]["model"])
    # GRPO's frozen reference (beta > 0, the policy from its config): a directory, or a block
    grpo = experiment_params(REPO / "tests" / "fixtures" / "grpo_tiny.jsonnet")["steps"]
    policy = {**grpo["fsdp2"]["model"], "grpo": {**grpo["fsdp2"]["model"]["grpo"], "beta": 0.04}}
    trained = {
        **grpo["fsdp2"],
        "model": policy,
        "dataset_dict": {"type": "ref", "ref": "grpo_data"},
    }
    grpo = {
        "grpo_data": grpo["data"],
        "grpo_reference_directory": {**trained, "reference": str(directory)},
        "grpo_reference_block": {**trained, "reference": reading(grpo["fsdp2"]["model"])},
    }
    graph = StepGraph.from_params({**demo, **dpo, **grpo})
    return {name: step.unique_id for name, step in graph.items()}


def test_the_steps_of_a_config_block_keep_the_ids_they_had():
    """No local directory, no `model_content`: the ids of e8868a6 (before it existed), so the
    demos' cached results are found again."""
    from tango.step_graph import StepGraph

    demo = StepGraph.from_params(experiment_params(EXPERIMENTS / "demo.jsonnet")["steps"])
    dpo = experiment_params(REPO / "tests" / "fixtures" / "dpo_tiny.jsonnet")["steps"]
    dpo = StepGraph.from_params(dpo)
    assert [demo[name].unique_id for name in ("eval_untrained", "report", "trained")] == [
        "Evaluate-003-3qvvazfcKPW8D8QzN8Cra7oF9ZRvdnod",
        # (the report's step gained `runs`, its table's order: another id, said; and the
        # training's collate, `catwalk::collate` since it was renamed, gave both another, said)
        "MetricsReport-003-64xZTxB2MjZjm9ZhAqgUeaeKGvrgxLaD",
        "TrainRankClassifier-003-3gmVn49s6NTNrAzPaRvcsPQavWvKiMpy",
    ]
    # (the reference's VERSION went to 002 with pairs cut to fit their answers: a said bump)
    assert [dpo[name].unique_id for name in ("dpo_reference", "dpo_trained")] == [
        "ReferenceLogprobs-002-bAzj7dxTmni1Jo2kY1DktmsEiZNxvMRP",
        "TrainRankClassifier-003-2pGdtCuzuzZSRkFE6XKg1BqSJA5J2haz",  # after it: another id
    ]


def test_every_step_of_a_directory_rewritten_in_place_is_another_step(tmp_path, record_home):
    directory = tmp_path / "model"
    save_model(directory, seed=1)
    first = graph_ids(directory)
    assert graph_ids(directory) == first  # unchanged: the same steps
    save_model(directory, seed=2)  # the same path, other weights
    second = graph_ids(directory)
    changed = {name for name in first if first[name] != second[name]}
    assert changed == DEPENDENT, sorted(changed ^ DEPENDENT)


@pytest.mark.slow
def test_a_directory_rewritten_between_two_runs_is_scored_again(tmp_path):
    """Through `tango run`: rewritten, the step is another (never "Found output ... in cache"
    with the old score) and scores the new weights; unchanged, it stays cached, also when the
    user's record of digests was damaged in between (ignored, written afresh)."""
    directory, workspace = tmp_path / "model", tmp_path / "ws"
    save_model(directory, seed=1)
    task = {"type": "catwalk::synthetic", "seed": 1, "sizes": {"validation": 64}}
    model = {"type": "catwalk::rank_classifier", "pretrained": str(directory)}
    experiment = tmp_path / "ev.jsonnet"
    step = {"type": "catwalk::evaluate", "model": model, "task": task}
    experiment.write_text(json.dumps({"steps": {"ev": step}}))
    env = {**TANGO_ENV, "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    def run(name: str) -> tuple[str, dict]:
        done = commands.run(tango_command(experiment, workspace, name), 300, env=env)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-3000:]
        result = step_result(workspace, name, "ev")
        return output, {"dir": result, **json.loads((result / "data.json").read_text())}

    output, first = run("first")
    assert 'Starting step "ev"' in output
    save_model(directory, seed=2)
    output, second = run("rewritten")
    assert 'Starting step "ev"' in output and "in cache" not in output
    assert second["dir"] != first["dir"]  # another step, and the new weights' scores:
    assert logprobs(second["dir"]) != logprobs(first["dir"])
    record = tmp_path / "xdg" / "catwalk_steps" / RECORD
    record.write_text("{damaged")
    time.sleep(2.1)  # the files are older than the racy window now: recorded
    output, third = run("unchanged")
    assert 'Found output for step "ev" in cache' in output and third["dir"] == second["dir"]
    files = json.loads(record.read_text())["files"]
    assert str((directory / "model.safetensors").resolve()) in files


def logprobs(result: Path) -> list:
    from catwalk_steps.workspace.formats import EvaluationFormat

    return [r["answer"]["logprobs"] for r in EvaluationFormat().read(result)["records"]]
