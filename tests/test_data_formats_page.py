"""docs/data-formats.md is what the package reads: every file the page shows is written as its
title names it, every task block is built and its file loaded through the package (the chat
ones with the page's own template, given as the `chat_template` key gives it), and each block
titled *loaded* is the first row as the task loaded it; the experiment builds its step graph, and
each one-line error the page quotes is what the package says."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph

from catwalk_steps.scoring.tokenization import chat_tokenizer, load_tokenizer
from catwalk_steps.tasks import Task
from catwalk_steps.tasks.chat_templates import ChatTemplate

from .conftest import REPO, experiment_params

PAGE = REPO / "docs" / "data-formats.md"
BLOCK = re.compile(r'^```(\w+)(?: title="([^"]+)")?\n(.*?)^```$', re.M | re.S)
TOKENIZER = "catwalk::byte_level"


def blocks() -> list[tuple[str, str | None, str]]:
    """(language, title, text) of each fenced block, in the page's order."""
    return [
        (language, title or None, text) for language, title, text in BLOCK.findall(PAGE.read_text())
    ]


def loaded(task: Task, template: ChatTemplate) -> dict:
    """The first training row as the page shows it: the fields a kind trains and scores on."""
    tokenizer = chat_tokenizer(task, TOKENIZER, "load_task.tokenizer", template)
    instance = asdict(task.load(["train"], tokenizer)["train"][0])
    if "answer" in instance:  # a prompt and its answer
        return {"prompt": instance["context"], "answer": instance["answer"]}
    if "chosen" in instance:
        return {key: instance[key] for key in ("prompt", "chosen", "rejected")}
    choices = list(instance["choices"])
    return {"context": instance["context"], "choices": choices, "label": instance["label"]}


@pytest.fixture
def page_files(tmp_path, monkeypatch) -> Path:
    """The files the page shows, under their titles, in a directory `tango run` would run in."""
    for _, title, text in blocks():
        if title and title != "loaded" and not title.endswith(".jsonnet"):
            (tmp_path / title).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / title).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_example_loads_as_the_page_says(page_files):
    template = ChatTemplate.of("chat.jinja", "model.chat_template")
    assert template is not None
    last, checked, tasks = None, 0, 0
    for language, title, text in blocks():
        if language == "jsonnet" and title is None:  # a task block, as an experiment has it
            path = page_files / f"task{tasks}.jsonnet"
            path.write_text(text)
            last, tasks = Task.from_params(experiment_params(path)), tasks + 1
        elif title == "loaded":
            assert last is not None, "a 'loaded' block follows a task block"
            assert loaded(last, template) == json.loads(text), (last.name, text)
            checked += 1
        elif title is not None and title.endswith(".jsonl"):
            for number, line in enumerate(text.splitlines(), start=1):
                assert isinstance(json.loads(line), dict), f"{title}:{number}"
    assert tasks >= 9 and checked == tasks


def test_the_experiment_builds_its_steps_with_the_template(page_files):
    (experiment,) = [text for _, title, text in blocks() if title == "experiment.jsonnet"]
    path = page_files / "experiment.jsonnet"
    path.write_text(experiment)
    graph = StepGraph.from_params(experiment_params(path)["steps"])
    data = graph["data"]
    assert data.kwargs["chat_template"] == (page_files / "chat.jinja").read_text()
    # The other way the page names: the file read from beside the experiment.
    path.write_text(experiment.replace("'chat.jinja'", "importstr 'chat.jinja'"))
    again = StepGraph.from_params(experiment_params(path)["steps"])
    assert again["data"].unique_id == data.unique_id


BAD = {
    "no such file": "chat.jinja",
    "not a Jinja template": "{% for m in messages %}{{ m.content }}",
    "fails on a user message": (
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('the first message must be "
        "the system message') }}{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    ),
    "renders '<|user|>'": "{% for m in messages %}<|{{ m.role }}|>{% endfor %}",
}


def test_each_error_the_page_quotes_is_the_packages(tmp_path, monkeypatch):
    page = PAGE.read_text()
    section = page[page.index("Each mistake is one line") :]
    lines = re.findall(r"^- `(.*)`$", section, re.M)
    monkeypatch.chdir(tmp_path)  # no chat.jinja here
    said = []
    for value in BAD.values():
        with pytest.raises(ConfigurationError) as error:
            template = ChatTemplate.of(value, "load_task.chat_template")
            assert template is not None
            load_tokenizer(TOKENIZER, "load_task.tokenizer", template)
        said.append(str(error.value))
    for name, block in (("capitals_chat", "data/capitals_chat.jsonl"), ("preference", None)):
        said.append(missing_template(tmp_path, name, block))
    assert said == lines


def missing_template(tmp_path: Path, name: str, data: str | None) -> str:
    """What loading a chat task of the page's without a template says."""
    text = dict((title, text) for _, title, text in blocks() if title)
    if data is None:  # the chat preference rows
        data, block = "data/prefs_chat.jsonl", {"type": "catwalk::preference"}
    else:
        block = {
            "type": "catwalk::generative", "name": name, "apply_chat_template": True,
            "doc_to_text": "{{messages[-2].content}}", "doc_to_target": "{{messages[-1].content}}",
        }  # fmt: skip
    path = tmp_path / data
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text[data])
    files = {"train": str(path), "validation": str(path)}
    task = Task.from_params({**block, "source": "files", "data_files": files})
    with pytest.raises(ConfigurationError) as error:
        chat_tokenizer(task, TOKENIZER, "load_task.tokenizer")
    return str(error.value)
