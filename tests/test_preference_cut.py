"""A preference pair longer than its window (a prompt of 25,000 tokens behind short answers) keeps
its answers whole and its prompt's end, as TRL's `truncation_mode='keep_end'` cuts a sequence,
in the reference step, in training and in evaluation alike, each saying in a warning how many
pairs were cut: an answer is never scored from outside the window (two answers cut to their
common first token had the same log-probability). The rule: :func:`fitted`; through `tango
run`: the last test."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from catwalk_steps.checks.start_warnings import cut_answer_warnings
from catwalk_steps.kinds import Collator, kind_of
from catwalk_steps.kinds.preference_batches import cut_pairs, fitted, fitted_pairs
from catwalk_steps.scoring.tokenization import load_tokenizer
from catwalk_steps.settings import LoaderSettings
from catwalk_steps.tasks.preference import PreferenceInstance
from catwalk_steps.tokenized.store import stored_training_tokens
from catwalk_steps.workspace.formats import InstancesFormat

from .conftest import REPO, run_tango, step_result

DPO = REPO / "tests" / "fixtures" / "dpo_tiny.jsonnet"
BYTES = load_tokenizer("catwalk::byte_level")
LONG = "Q: " + "word " * 5000 + "?\nA:"  # 25,007 bytes: byte-level tokens, one each
# Both answers start with " b": cut to one token each (the old rule), they scored the same.
CHOSEN, REJECTED = " blue sky\n", " bright red\n"  # 10 and 13 tokens with the end-of-text
KEPT = 128 - 13  # the prompt's tokens left before the longer answer in max_length 128


def test_a_pair_that_fits_is_whole_and_a_long_prompt_keeps_its_end_before_whole_answers():
    prompt, chosen, rejected = list(range(100)), [1, 2, 3], [4, 5, 6, 7, 8]
    assert fitted(prompt, chosen, rejected, 128) == (prompt, chosen, rejected)
    assert fitted(prompt, chosen, rejected, 50) == (prompt[-45:], chosen, rejected)
    # An answer longer than the window keeps its start, after the prompt's last token.
    assert fitted(prompt, list(range(60)), rejected, 50) == ([99], list(range(49)), rejected)


def test_the_pairs_cut_are_counted_and_training_says_so(tmp_path):
    long = PreferenceInstance(LONG, CHOSEN, REJECTED)
    short = PreferenceInstance("Q: one?\nA:", " yes\n", " no\n")
    (pair,) = fitted_pairs(BYTES, 128, [long])
    assert len(pair.prompt) == KEPT and BYTES.decode(pair.prompt) == LONG[-KEPT:]
    assert BYTES.decode(pair.chosen) == CHOSEN + "<|endoftext|>"  # whole
    assert cut_pairs(BYTES, 128, [short, long]) == (1, 0)
    assert cut_pairs(BYTES, 5, [short]) == (1, 1)  # " yes\n" and its end: 6 tokens
    collate = {"type": "catwalk::collate", "tokenizer": "catwalk::byte_level"}
    loader = LoaderSettings("train_dataloader", None, {}, {**collate, "max_length": 128})
    tokens = stored_training_tokens(
        kind_of([short]), Collator(collate["tokenizer"], 128), [short, long],
        "pairs", tmp_path, logging.getLogger("test"),
    )  # fmt: skip
    (line,) = cut_answer_warnings([("train", loader, tokens)])
    assert line.startswith(
        "train_dataloader.collate_fn.max_length: 1 of 2 train instances have a prompt too long "
        "for their answers to fit after it in 128 tokens: the prompt's start is cut"
    ), line


def pairs_file(tmp_path: Path) -> Path:
    """A short pair, the long one, and the long one's prompt as the window keeps it."""
    rows = [
        {"prompt": "Q: one?\nA:", "chosen": " yes\n", "rejected": " no\n"},
        {"prompt": LONG, "chosen": CHOSEN, "rejected": REJECTED},
        {"prompt": LONG[-KEPT:], "chosen": CHOSEN, "rejected": REJECTED},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.slow
def test_a_long_prompt_is_cut_alike_in_the_reference_training_and_evaluation(tmp_path):
    """Through `tango run`, no task max_length: the long pair's answers are scored whole
    (different log-probabilities, the same as behind the prompt's kept end), and a policy
    trained with a learning rate of 1e-12 (still its reference) has every reward 0 in
    validation and in its evaluation: the same tokens everywhere."""
    path = str(pairs_file(tmp_path))
    task = {"type": "catwalk::preference", "source": "files"}
    overrides = {
        "steps.dpo_data.task": {**task, "data_files": {"train": path, "validation": path}},
        "steps.dpo_trained.training_engine.optimizer.lr": 1e-12,
    }
    output = run_tango(DPO, tmp_path / "ws", "cut", overrides)
    said = "1 of 3 {} instances have a prompt too long for their answers to fit after it in 128"
    for field in ("reference_logprobs.max_length", "collate_fn.max_length"):
        assert f"{field}: {said.format('train')}" in output, field
    assert f"reference_logprobs.max_length: {said.format('validation')}" in output
    stored = InstancesFormat().read(step_result(tmp_path / "ws", "cut", "dpo_reference"))
    short, long, tail = [list(pair.reference) for pair in stored["train"]]
    assert long[0] != pytest.approx(long[1], abs=0.1)  # not one shared token
    assert long == pytest.approx(tail, abs=1e-4)  # the answers whole, behind the kept end
    after = step_result(tmp_path / "ws", "cut", "dpo_eval_after")
    records = [json.loads(line) for line in (after / "records.jsonl").read_text().splitlines()]
    for record in records:
        assert record["answer"]["logps"] == pytest.approx(
            [short, long, tail][record["doc"]], abs=1e-4
        )
        assert record["answer"]["rewards"] == pytest.approx([0.0, 0.0], abs=1e-5)
    history = json.loads((after / "data.json").read_text())["training_history"]
    validation = history["validation"][-1]
    assert validation["rewards/chosen"] == pytest.approx(0.0, abs=1e-5)
    assert validation["rewards/rejected"] == pytest.approx(0.0, abs=1e-5)
