"""Preference tuning's bad inputs through the real command: `tango run` in a process of its own
fails in one line naming the field, or the file and line, with exit status 1, before any step
starts, and trains nothing. (In-process: tests/test_preference_data.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from catwalk_steps.scoring.tokenization import load_tokenizer

from . import commands
from .commands import error_lines
from .conftest import LIBRARY, REPO, TANGO_ENV, tango_command

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
        "ConfigurationError: model.objective: 'lm' trains on choices (one right) or answers (one "
        "per prompt), and task 'synthetic_preference' holds preference pairs; use objective 'dpo'",
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
    "ConfigurationError: model.objective: 'dpo' trains on preference pairs, and task "
    "'SyntheticTask' holds choices (one right); use objective 'lm' or 'rank'"
)
# Another objective's settings block (an unknown objective: tests/test_bad_inputs.py).
ANOTHER_OBJECTIVES_BLOCK = (
    "ConfigurationError: model.dpo: settings of objective 'dpo', and the model's objective is 'lm'"
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


def model_directory(path: Path, vocab_size: int, tokenizer: str | None) -> Path:
    """A tiny GPT-2's config (no weights: the graph build reads none) of `vocab_size`, and
    `tokenizer`'s files beside it (None: none, as a directory of weights alone)."""
    from transformers import GPT2Config

    GPT2Config(
        n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=vocab_size
    ).save_pretrained(path)
    if tokenizer is not None:
        load_tokenizer(tokenizer).save_pretrained(path)
    return path


INIT_FROM_STEP = """local lib = import '{lib}';
local small = lib.training.demo {{ device_count: 1, batch_size: 4, train_steps: 2 }};
lib.pipeline(lib.tasks.synthetic_generative {{ sizes: {{ train: 8, validation: 8 }} }},
             lib.models.tiny_gpt2 {{ tokenizer: '{tokenizer}' }}, lib.engines.torch(), small,
             prefix='sft_')
+ lib.preference(lib.tasks.synthetic_preference {{ sizes: {{ train: 8, validation: 8 }} }},
                 lib.models.tiny_gpt2, lib.engines.torch(), small,
                 reference=lib.models.tiny_gpt2, init_from=lib.ref('sft_trained'))
"""


def init_from_cases(tmp_path: Path) -> dict[str, tuple]:
    """`train.init_from` a model of another vocabulary: a directory with its tokenizer, one of
    weights alone, and another step's model (DPO after an SFT run of another tokenizer)."""
    other = model_directory(tmp_path / "neox_model", 50280, TOKENIZER)
    bare = model_directory(tmp_path / "neox_weights", 50280, None)
    chained = tmp_path / "init_from_step.jsonnet"
    lib = LIBRARY / "pipeline.libsonnet"
    chained.write_text(INIT_FROM_STEP.format(lib=lib, tokenizer=TOKENIZER))
    differs = "its embeddings are rows of another vocabulary"
    return {
        "init_from_other_vocabulary": (
            DPO,
            {"steps.dpo_trained.init_from": str(other)},
            f"ConfigurationError: train.init_from: the model in {other} has tokenizer "
            f"'{other}' (50,280 tokens), and the model block's is 'catwalk::byte_level' (257): "
            + differs,
        ),
        "init_from_weights_of_another_vocabulary": (
            DPO,
            {"steps.dpo_trained.init_from": str(bare)},
            f"ConfigurationError: train.init_from: the model in {bare} has a vocabulary of "
            "50,280 tokens, and the model block's tokenizer 'catwalk::byte_level' has 257",
        ),
        "init_from_a_step_of_another_tokenizer": (
            chained,
            None,
            "ConfigurationError: train.init_from: the model of step 'sft_trained' has tokenizer "
            f"'{TOKENIZER}' (50,280 tokens), and the model block's is 'catwalk::byte_level' "
            "(257): " + differs,
        ),
    }


@pytest.mark.slow
def test_each_bad_input_is_one_line_through_tango_run_before_any_step(tmp_path):
    cases = {
        name: (*bad_rows_case(tmp_path, name), f"{tmp_path / name}.jsonl{BAD_ROWS[name][1]}")
        for name in BAD_ROWS
    }
    cases.update({name: (DPO, o, line) for name, (o, line) in SETTINGS.items()})
    cases.update(init_from_cases(tmp_path))
    cases["dpo_on_choices"] = (DEMO, {"steps.trained.model.objective": "dpo"}, ON_CHOICES)
    another = {"steps.trained.model.dpo": {"beta": 0.2}}
    cases["settings_of_another_objective"] = (DEMO, another, ANOTHER_OBJECTIVES_BLOCK)
    in_loop = {"steps.trained.evaluate_tasks": [{"type": "catwalk::synthetic_preference"}]}
    cases["pairs_in_the_loop"] = (DEMO, in_loop, IN_LOOP)
    argvs = {name: tango_command(e, tmp_path / name, name, o) for name, (e, o, _) in cases.items()}
    for name, (line, text) in commands.one_line_failures(argvs, tmp_path).items():
        assert cases[name][2] in line, (name, line)
        assert 'Starting step "' not in text, name
        assert not list((tmp_path / name / "cache").glob("*")), name


STARTS_FROM = """local lib = import '{lib}';
lib.preference(lib.tasks.synthetic_preference {{ sizes: {{ train: 16, validation: 8 }} }},
               lib.models.tiny_gpt2, lib.engines.torch(),
               lib.training.demo {{ device_count: 1, batch_size: 4, train_steps: 2,
                                   validate_every: 2, lr: 1e-12 }},
               init_from='{directory}')
"""


@pytest.mark.slow
def test_lib_preference_starts_from_a_model_directory(tmp_path):
    """`lib.preference(init_from='<a directory>')`, as the docs say it may be given: the
    graph builds (it was a 47-line `AttributeError` there) and the policy trains from the
    directory's weights (at a learning rate of 1e-12 they are what it saves)."""
    import torch
    from safetensors.torch import load_file
    from transformers import GPT2Config, GPT2LMHeadModel

    from .conftest import run_tango, step_result

    tokenizer = load_tokenizer("catwalk::byte_level")
    config = GPT2Config(
        n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=len(tokenizer),
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_pytorch_tanh",
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(7)  # other weights than the block's own random init (seed 0)
    directory = tmp_path / "sft_model"
    GPT2LMHeadModel(config).save_pretrained(directory)
    experiment = tmp_path / "from_directory.jsonnet"
    lib = LIBRARY / "pipeline.libsonnet"
    experiment.write_text(STARTS_FROM.format(lib=lib, directory=directory))
    run_tango(experiment, tmp_path / "ws", "from_directory")
    trained = load_file(
        step_result(tmp_path / "ws", "from_directory", "dpo_trained") / "model.safetensors"
    )
    start = load_file(directory / "model.safetensors")
    assert set(start) <= set(trained)
    for name, weights in start.items():
        torch.testing.assert_close(trained[name], weights, rtol=0, atol=1e-6, msg=name)


@pytest.mark.slow
def test_a_bad_row_past_the_first_rows_is_one_line_from_the_load_step(tmp_path):
    """The graph build checks each file's first rows (HEAD_ROWS); the load step reads every
    row as it stores it: a bad row after the first ones is one line naming its file and line,
    from the load step, and no step after it starts (nothing is cached)."""
    from catwalk_steps.tasks.preference import HEAD_ROWS

    line = HEAD_ROWS + 50
    path = tmp_path / "pairs.jsonl"
    rows = [GOOD] * (line - 1) + [BAD_ROWS["same_answer"][0]]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = {"type": "catwalk::preference", "source": "files", "max_length": 128}
    task["data_files"] = {"train": str(path), "validation": str(path)}
    argv = tango_command(DPO, tmp_path / "ws", "deep", {"steps.dpo_data.task": task})
    out = tmp_path / "deep.txt"
    code = commands.start(argv, out, env={**TANGO_ENV, "COLUMNS": "400"}).wait(300)
    text = out.read_text()
    lines = error_lines(text)
    assert code == 1 and len(lines) == 1, lines or text[-3000:]
    assert f"{path}:{line}: 'chosen' and 'rejected' are the same answer" in lines[0], lines[0]
    assert re.findall(r'Starting step "([^"]+)"', text) == ["dpo_data"]
    assert not list((tmp_path / "ws" / "cache").glob("*/splits.json"))
