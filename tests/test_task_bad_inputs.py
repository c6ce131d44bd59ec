"""A task's data and a model's chat template, through the real command: a split the files lack, a
chat template that renders nothing or fails, a row whose target is null (trained or evaluated:
refused where it is read), each one line naming the task and the cause (at graph build where it
is known then: no step starts); and a generative task without `metric_list` scored as
lm-evaluation-harness scores it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from catwalk_steps.scoring.tokenization import byte_level_tokenizer
from catwalk_steps.tasks import Task

from . import commands
from .commands import error_lines
from .conftest import TANGO_ENV, TINY_DEMO, TINY_MODEL, run_tango, step_result, tango_command
from .test_one_line_through_tango_run import DEMO, evaluate

ROWS = [
    {"question": "Which is yellow?", "options": ["banana", "cherry"], "answer": 0},
    {"question": "Which is red?", "options": ["banana", "cherry"], "answer": 1},
]
# The demo as small as it runs, its task replaced (TINY_DEMO sets the synthetic task's sizes).
TRAIN = {key: value for key, value in TINY_DEMO.items() if not key.startswith("steps.data")}
PAIRS = [{"q": "one", "a": "uno"}, {"q": "two", "a": None}, {"q": "three", "a": "tres"}]
TEMPLATES = {
    "empty": "{% for m in messages %}{% endfor %}",
    "raises": "{{ raise_exception('boom') }}",
    "undefined": "{{ nope.x }}",
    # Renders a probe, fails on a question that holds 'forbidden': known only when it runs.
    "picky": "{% for m in messages %}{% if 'forbidden' in m.content %}"
    "{{ raise_exception('forbidden word') }}{% endif %}<{{ m.role }}>{{ m.content }}"
    "{% endfor %}<assistant>",
}


def fruit(path: Path, **keys) -> dict:
    """docs/evaluation/suite.md's "A task of your own", its data a validation file alone."""
    return {
        "name": "fruit",
        "source": "files",
        "data_files": {"validation": str(path)},
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_choice": "{{options}}",
        "doc_to_target": "answer",
        **keys,
    }


def capitals(path: Path, **keys) -> dict:
    """A generative task of one's own, without metric_list."""
    return {
        "type": "catwalk::generative",
        "name": "capitals",
        "source": "files",
        "data_files": {"train": str(path), "validation": str(path)},
        "doc_to_text": "Q: {{q}}\nA:",
        "doc_to_target": "{{a}}",
        "until": ["\n"],
        "max_gen_toks": 4,
        **keys,
    }


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def chat_tokenizers(directory: Path) -> dict[str, str]:
    """The byte-level tokenizer saved with each of TEMPLATES as its chat template."""
    paths = {}
    for name, template in TEMPLATES.items():
        tokenizer = byte_level_tokenizer()
        tokenizer.chat_template = template
        tokenizer.save_pretrained(directory / name)
        paths[name] = str(directory / name)
    return paths


def model_with(tokenizer: str) -> dict:
    return {**TINY_MODEL, "tokenizer": tokenizer}


def cases(tmp_path: Path) -> dict[str, tuple[Path | dict, dict, str, bool | str]]:
    """name -> (experiment file or contents, overrides, the error line, whether a step starts,
    or the one step that starts)."""
    validation = write_rows(tmp_path / "fruit_validation.jsonl", ROWS)
    forbidden = write_rows(tmp_path / "forbidden.jsonl", [{**ROWS[0], "question": "forbidden?"}])
    pairs = write_rows(tmp_path / "pairs.jsonl", PAIRS)
    toks = chat_tokenizers(tmp_path / "tokenizers")
    chat = {"apply_chat_template": True}
    exact = {"metric_list": [{"metric": "exact_match"}]}  # as before its default
    cause = "ConfigurationError: task 'fruit'.apply_chat_template: the chat template of tokenizer "
    null = (
        f"TaskDataError: task 'capitals': {pairs}:2: doc_to_target is null (no answer to score or "
        "train on; lm-evaluation-harness would take the text 'None'); give the row its answer or "
        "leave the row out"
    )
    return {
        "validation_file_alone_trained": (
            DEMO,
            {**TRAIN, "steps.data.task": fruit(validation)},
            "ConfigurationError: load_task.splits: task 'fruit' has no split 'train' (data_files "
            f"gives validation: {validation}; give a file for each split the step loads)",
            False,
        ),
        "split_not_loaded_for_training": (
            DEMO,
            {**TINY_DEMO, "steps.data.splits": ["validation"]},
            "ConfigurationError: train.train_split: 'train' is not loaded by the data step "
            "(splits: validation); add it to the data step's splits",
            False,
        ),
        "evaluated_split_not_in_the_files": (
            evaluate(task=fruit(validation), split="test"),
            {},
            "ConfigurationError: evaluate.split: task 'fruit' has no split 'test' (data_files "
            f"gives validation: {validation}; ",
            False,
        ),
        "in_loop_task_split_not_in_the_files": (
            DEMO,
            {**TINY_DEMO, "steps.trained.evaluate_tasks": [fruit(validation, split="test")]},
            "ConfigurationError: task 'fruit': split 'test' is not in the data (data_files gives "
            f"validation: {validation}; ",
            False,
        ),
        "chat_template_rendering_nothing": (
            evaluate(task=fruit(validation, **chat), model=model_with(toks["empty"])),
            {},
            f"{cause}'{toks['empty']}' renders nothing (an empty prompt); give a model whose "
            "template writes each message's content",
            False,
        ),
        "chat_template_rendering_nothing_generative": (
            evaluate(task=capitals(pairs, **chat, **exact), model=model_with(toks["empty"])),
            {},
            cause.replace("fruit", "capitals") + f"'{toks['empty']}' renders nothing",
            False,
        ),
        "chat_template_raising": (
            evaluate(
                task=fruit(validation, system_instruction="Be brief.", **chat),
                model=model_with(toks["raises"]),
            ),
            {},
            f"{cause}'{toks['raises']}' fails: TemplateError: boom",
            False,
        ),
        "chat_template_naming_an_undefined_variable": (
            evaluate(task=fruit(validation, **chat), model=model_with(toks["undefined"])),
            {},
            f"{cause}'{toks['undefined']}' fails: UndefinedError: 'nope' is undefined",
            False,
        ),
        "chat_template_failing_on_a_question": (
            evaluate(task=fruit(forbidden, **chat), model=model_with(toks["picky"])),
            {},
            f"{cause}'{toks['picky']}' fails: TemplateError: forbidden word",
            True,
        ),
        "chat_template_raising_in_training": (
            DEMO,
            {
                **TRAIN,
                "steps.data.task": capitals(pairs, **chat, **exact),
                "steps.data.tokenizer": toks["raises"],
            },
            cause.replace("fruit", "capitals") + f"'{toks['raises']}' fails: TemplateError: boom",
            False,
        ),
        # Refused where the rows are read: the load step (training never starts), the evaluation
        # (lm-eval would score the gold answer "None").
        "null_target_trained": (DEMO, {**TRAIN, "steps.data.task": capitals(pairs)}, null, "data"),
        "null_target_evaluated": (evaluate(task=capitals(pairs)), {}, null, "ev"),
    }


@pytest.mark.slow
def test_each_task_input_is_one_line_through_tango_run(tmp_path):
    started, table = {}, cases(tmp_path)
    for name, (experiment, overrides, _, _) in table.items():
        if isinstance(experiment, dict):
            experiment_file = tmp_path / f"{name}.jsonnet"
            experiment_file.write_text(json.dumps(experiment))
            experiment = experiment_file
        argv = tango_command(experiment, tmp_path / name, name, overrides)
        out = tmp_path / f"{name}.txt"
        started[name] = (commands.start(argv, out, env={**TANGO_ENV, "COLUMNS": "1000"}), out)
    wrong = {
        name: why
        for name, (command, out) in started.items()
        if (why := fault(name, command, out, table[name], tmp_path))
    }
    assert not wrong, "\n".join(f"{name}: {why[:300]}" for name, why in wrong.items())


def fault(name: str, command, out: Path, case: tuple, tmp_path: Path) -> str | None:
    """What is wrong with a case's run (None: one line, the expected one, nothing cached)."""
    experiment, _, expected, starts = case
    code = command.wait(300)
    text = out.read_text()
    lines = error_lines(text)
    if code != 1 or len(lines) != 1:
        return f"exit {code}, {len(lines)} error lines: {(lines or [text[-2000:]])[:3]}"
    if expected not in lines[0]:
        return lines[0]
    if "refused a system turn" in text:
        return "a misleading warning: refused a system turn"
    if not starts and 'Starting step "' in text:
        return "a step started"
    started = re.findall(r'Starting step "([^"]+)"', text)
    if isinstance(starts, str) and started != [starts]:
        return f"steps started: {started}, only {starts!r} should"
    cache = tmp_path / name / "cache"
    if isinstance(experiment, dict) and list(cache.glob("Evaluate*/data.json")):
        return "its one step failed, but a number is cached"
    if list(cache.glob("Train*/model.safetensors")):
        return "a trained model is cached"
    return None


@pytest.mark.slow
def test_a_generative_task_without_metric_list_is_scored_by_exact_match(tmp_path):
    """lm-evaluation-harness 0.4.13's default for `generate_until`: exact_match, no options."""
    rows = write_rows(tmp_path / "rows.jsonl", PAIRS[:1] + PAIRS[2:])
    experiment = tmp_path / "capitals.jsonnet"
    experiment.write_text(json.dumps(evaluate(task=capitals(rows))))
    run_tango(experiment, tmp_path / "ws", "capitals", timeout=300)
    metrics = json.loads((step_result(tmp_path / "ws", "capitals", "ev") / "data.json").read_text())
    assert "exact_match,none" in json.dumps(metrics), metrics


@pytest.mark.parametrize("given", [None, [{"metric": "exact_match"}]])
def test_the_default_metric_scores_as_lm_evaluation_harness_s_own_default(tmp_path, given):
    """The default scores as the explicit `[{metric: exact_match}]` (the same identity), and as
    lm-eval scored the fixture's task of one's own (its exact_match without options)."""
    from .test_generation import FIXTURE

    own = FIXTURE["own_answers"]
    rows = write_rows(tmp_path / "own.jsonl", own["docs"])
    block = {
        "type": "catwalk::generative",
        "name": "own",
        "source": "files",
        "data_files": {"validation": str(rows)},
        "doc_to_text": own["config"]["doc_to_text"],
        "doc_to_target": own["config"]["doc_to_target"],
        "until": own["config"]["generation_kwargs"]["until"],
    }
    default = Task.from_params(dict(block))
    task = Task.from_params({**block, "metric_list": given}) if given else default
    assert task.det_hash_object() == default.det_hash_object()
    instances = task.evaluation_instances()
    for row, instance in zip(own["rows"], instances, strict=True):
        assert instance.score(row["generation"])["scores"] == row["scores"], row["doc_id"]
    target = instances[0].targets[0]  # no option: case counts
    assert instances[0].score(target)["scores"] == {"exact_match,none": 1.0}
    assert instances[0].score(target.swapcase())["scores"] == {"exact_match,none": 0.0}
