"""Preference tuning's bad inputs through the real command: `tango run` in a process of its own
fails in one line naming the field, or the file and line, with exit status 1, before any step
starts, and trains nothing. (In-process: tests/test_preference_data.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import commands
from .commands import error_lines
from .conftest import REPO, TANGO_ENV, tango_command

DPO = REPO / "tests" / "fixtures" / "dpo_tiny.jsonnet"
GOOD = {"prompt": "Q: one?\nA:", "chosen": " yes", "rejected": " no"}
BAD_ROWS = {
    "missing_field": (
        {"prompt": "Q: two?\nA:", "chosen": " yes"},
        ":2: field 'rejected' is missing",
    ),
    "same_answer": (
        {"prompt": "Q: two?\nA:", "chosen": " yes", "rejected": " yes"},
        ":2: 'chosen' and 'rejected' are the same answer",
    ),
    "answer_forms_differ": (
        {
            "prompt": "Q: two?\nA:",
            "chosen": [{"role": "assistant", "content": "yes"}],
            "rejected": "no",
        },
        ":2: field 'rejected' must be a text, or a list of {role, content} messages as 'chosen' is",
    ),
    "prompt_too_long": (
        {"prompt": "Q: " + "two " * 40 + "?\nA:", "chosen": " yes", "rejected": " no"},
        ":2: the prompt has 167 tokens, and max_length 128 leaves no room for an answer",
    ),
    "empty_prompt": (
        {"prompt": "", "chosen": " yes", "rejected": " no"},
        ":2: field 'prompt' is empty; an answer is scored from the prompt before it",
    ),
    "message_without_content": (
        {
            "prompt": [{"role": "user", "content": "two?"}, {"role": "assistant"}],
            "chosen": [{"role": "assistant", "content": "yes"}],
            "rejected": [{"role": "assistant", "content": "no"}],
        },
        ":2: field 'prompt': message 2 has no 'content'",
    ),
    "prompt_as_object": (
        {
            "prompt": {"role": "user", "content": "two?"},
            "chosen": [{"role": "assistant", "content": "yes"}],
            "rejected": [{"role": "assistant", "content": "no"}],
        },
        ":2: field 'prompt' must be a text or a list of {role, content} messages, got an object",
    ),
}
TOKENIZER = "olmo_eval::gpt-neox-olmo-dolma-v1_5"
# name -> (overrides of the tiny DPO run, the error line)
SETTINGS = {
    "unknown_loss_type": (
        {"steps.dpo_trained.model.dpo.loss_type": "kto"},
        "ConfigurationError: model.dpo.loss_type: one of sigmoid, ipo, hinge, robust, got 'kto'",
    ),
    "beta_zero": (
        {"steps.dpo_trained.model.dpo.beta": 0},
        "ConfigurationError: model.dpo.beta: a number > 0, got 0",
    ),
    "reference_tokenizer": (
        {"steps.dpo_reference.model.tokenizer": TOKENIZER},
        f"ConfigurationError: reference_logprobs.model: the reference's tokenizer '{TOKENIZER}' "
        "differs from the policy's 'catwalk::byte_level'",
    ),
    "pairs_trained_as_lm": (
        {"steps.dpo_trained.model.objective": "lm"},
        "ConfigurationError: model.objective: task 'synthetic_preference' holds preference pairs, "
        "trained on with objective 'dpo'; got 'lm'",
    ),
    "no_reference": (
        {"steps.dpo_trained.dataset_dict": {"type": "ref", "ref": "dpo_data"}},
        "ConfigurationError: train.dataset_dict: objective 'dpo' compares the model with a "
        "reference: give the data through a catwalk::reference_logprobs step",
    ),
    "reference_split": (
        {"steps.dpo_reference.splits": ["test"]},
        "ConfigurationError: reference_logprobs.splits: 'test' is not in the dataset (splits: "
        "train, validation)",
    ),
    "reference_past_positions": (
        {"steps.dpo_reference.max_length": 1000},
        "ConfigurationError: reference_logprobs.max_length: 1000 tokens, but the model has 128 "
        "positions",
    ),
    "reference_cut_otherwise": (
        {"steps.dpo_reference.max_length": 64},
        "ConfigurationError: train_dataloader.collate_fn.max_length: 128, and the reference step "
        "'dpo_reference' scored the pairs with max_length 64",
    ),
    "reference_of_choices": (
        {"steps.dpo_data.task": {"type": "catwalk::synthetic", "sizes": {"train": 8}}},
        "ConfigurationError: reference_logprobs.dataset_dict: a reference's log-probabilities "
        "are of preference pairs, and these instances are multiple choice",
    ),
}


DEMO = REPO / "experiments" / "demo.jsonnet"
ON_CHOICES = (
    "ConfigurationError: model.objective: 'dpo' trains on preference pairs (a preference task), "
    "and task 'SyntheticTask' is multiple choice"
)

IN_LOOP = (
    "ConfigurationError: train.evaluate_tasks: task 'synthetic_preference' holds preference "
    "pairs, whose rewards are scored against a reference"
)


def bad_rows_case(tmp_path: Path, name: str) -> tuple[Path, dict]:
    """The tiny DPO run on a file of two rows, the second bad."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(BAD_ROWS[name][0]) + "\n")
    task = {"type": "catwalk::preference", "source": "files", "max_length": 128}
    task["data_files"] = {"train": str(path), "validation": str(path)}
    return DPO, {"steps.dpo_data.task": task}


@pytest.mark.slow
def test_each_bad_input_is_one_line_through_tango_run_before_any_step(tmp_path):
    cases = {
        name: (*bad_rows_case(tmp_path, name), f"{tmp_path / name}.jsonl{BAD_ROWS[name][1]}")
        for name in BAD_ROWS
    }
    cases.update({name: (DPO, o, line) for name, (o, line) in SETTINGS.items()})
    cases["dpo_on_choices"] = (DEMO, {"steps.trained.model.objective": "dpo"}, ON_CHOICES)
    in_loop = {"steps.trained.evaluate_tasks": [{"type": "catwalk::synthetic_preference"}]}
    cases["pairs_in_the_loop"] = (DEMO, in_loop, IN_LOOP)
    started = {}
    for name, (experiment, overrides, _) in cases.items():
        argv = tango_command(experiment, tmp_path / name, name, overrides)
        out = tmp_path / f"{name}.txt"
        started[name] = (commands.start(argv, out, env={**TANGO_ENV, "COLUMNS": "400"}), out)
    for name, (command, out) in started.items():
        code = command.wait(300)
        text = out.read_text()
        lines = error_lines(text)
        assert code == 1 and len(lines) == 1, (name, code, lines or text[-3000:])
        assert cases[name][2] in lines[0], (name, lines[0])
        assert 'Starting step "' not in text, name
        assert not list((tmp_path / name / "cache").glob("*")), name
