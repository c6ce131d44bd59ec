"""`chat_template` on the model block (and `catwalk::load_task`): a tokenizer without a template of
its own (the byte-level one) given one by the key trains and evaluates chat rows through
`tango run`, and saves it with the trained model; a bad template is one line before any step
runs; a missing template is said as it is where the user is (the task's key or its chat rows;
the key that named the tokenizer; what can be given there); the template file's content is
part of the steps' identity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tango.step_graph import StepGraph

from catwalk_steps.workspace.formats import InstancesFormat

from . import commands
from .conftest import LIBRARY, experiment_params, run_tango, step_result, tango_command

TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CAPITALS = {"France": "Paris", "Peru": "Lima", "Japan": "Tokyo", "Kenya": "Nairobi"}
WRONG = {"France": "Lyon", "Peru": "Cusco", "Japan": "Kyoto", "Kenya": "Mombasa"}

HEAD = """local lib = import '{lib}';
local model = lib.models.tiny_gpt2 {{ chat_template: {template} }};
local small = lib.training.demo {{ device_count: 1, batch_size: 2, eval_batch_size: 4,
                                   train_steps: 2, validate_every: 2, checkpoint_every: 2 }};
local sft = {{ type: 'catwalk::generative', name: 'capitals', source: 'files',
               data_files: {{ train: '{sft}', validation: '{sft}' }},
               doc_to_text: '{{{{messages[-2].content}}}}',
               doc_to_target: '{{{{messages[-1].content}}}}',
               apply_chat_template: true, until: ['<|end|>'], max_gen_toks: 4 }};
local prefs = {{ type: 'catwalk::preference', source: 'files',
                 data_files: {{ train: '{prefs}', validation: '{prefs}' }} }};
"""
SFT = """lib.pipeline(sft, model, lib.engines.torch(), small { evaluate_tasks: [sft] },
             prefix='sft_')
+ { steps+: { chat_eval: { type: 'catwalk::evaluate', model: lib.ref('sft_trained'),
                            task: sft { split: 'validation' }, max_length: 128 } } }
"""
DPO = "lib.preference(prefs, model, lib.engines.torch(), small, dpo={ beta: 0.1 }%s)\n"
RUN = SFT + "+ " + DPO % ", init_from=lib.ref('sft_trained')"


def turn(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def question(country: str) -> dict:
    return turn("user", f"What is the capital of {country}?")


def chat_files(tmp_path: Path) -> dict[str, Path]:
    """TRL's conversational rows: `messages` for SFT; preference pairs with an explicit prompt
    and with the prompt inside both conversations (implicit)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    sft, prefs = tmp_path / "sft.jsonl", tmp_path / "prefs.jsonl"
    sft.write_text(
        "".join(
            json.dumps({"messages": [question(c), turn("assistant", a)]}) + "\n"
            for c, a in CAPITALS.items()
        )
    )
    rows = []
    for country, answer in CAPITALS.items():
        chosen, rejected = turn("assistant", answer), turn("assistant", WRONG[country])
        if country == "Peru":  # the prompt implicit: the turns both conversations start with
            chosen_turns, rejected_turns = (
                [question(country), chosen],
                [question(country), rejected],
            )
            rows.append({"chosen": chosen_turns, "rejected": rejected_turns})
        else:
            rows.append({"prompt": [question(country)], "chosen": [chosen], "rejected": [rejected]})
    prefs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    template = tmp_path / "chat.jinja"
    template.write_text(TEMPLATE)
    return {"sft": sft, "prefs": prefs, "template": template}


def experiment(tmp_path: Path, template: str | None, body: str = RUN) -> Path:
    """The run (`body`: SFT, then DPO from its model), its model's `chat_template` as given (a
    jsonnet value; None: the template's file)."""
    files = chat_files(tmp_path)
    value = f"'{files['template']}'" if template is None else template
    path = tmp_path / "chat_run.jsonnet"
    head = HEAD.format(
        lib=LIBRARY / "pipeline.libsonnet", template=value, sft=files["sft"], prefs=files["prefs"]
    )
    path.write_text(head + body)
    return path


@pytest.mark.slow
def test_a_byte_level_tokenizer_given_a_template_by_the_key_trains_and_evaluates_chat_rows(
    tmp_path,
):
    """SFT on `messages` rows, then DPO on chat pairs from the SFT model, the byte-level
    tokenizer's template given by the model block's key as a file: the prompts are the
    template's (the data's, and the in-loop task's), the trained model keeps it, and an
    evaluation of the trained model renders with it."""
    workspace = tmp_path / "ws"
    run_tango(experiment(tmp_path, None), workspace, "chat")

    def result(step: str, name: str) -> dict:
        return json.loads((step_result(workspace, "chat", step) / name).read_text())

    prompt = "<|user|>\nWhat is the capital of France?<|end|>\n<|assistant|>\n"

    def stored(step: str) -> list:
        return list(InstancesFormat().read(step_result(workspace, "chat", step))["train"])

    sft = stored("sft_data")[0]
    assert (sft.context, sft.answer) == (prompt, "Paris<|end|>")
    pairs = stored("dpo_data")
    assert (pairs[0].prompt, pairs[0].chosen, pairs[0].rejected) == (
        prompt, "Paris<|end|>\n", "Lyon<|end|>\n",
    )  # fmt: skip
    assert pairs[1].prompt == prompt.replace("France", "Peru")  # the implicit prompt
    trained = step_result(workspace, "chat", "sft_trained")
    assert (trained / "chat_template.jinja").read_text() == TEMPLATE
    history = json.loads((trained / "catwalk_model.json").read_text())["metrics_history"]
    assert [row["step"] for row in history["tasks"]["capitals"]] == [2]  # scored in the loop
    outputs = result("chat_eval", "data.json")["outputs"]  # the trained model's own template
    assert [o["context"] for o in outputs][:1] == [prompt]
    assert result("dpo_eval_after", "data.json")["n"] == 4


NO_FILE = "/nowhere/chat.jinja"
REFUSES = (
    "{% if messages[0]['role'] != 'system' %}{{ raise_exception('the first message must be "
    "the system message') }}{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"
)
BAD_TEMPLATES = {
    "template_file_missing": (
        f"'{NO_FILE}'",
        f"ConfigurationError: load_task.chat_template: '{NO_FILE}': no such file (a chat "
        "template is the path of a Jinja file, or the template itself",
    ),
    "template_syntax": (
        "'{% for m in messages %}{{ m.content }}'",
        "ConfigurationError: load_task.chat_template: not a Jinja template: Unexpected end of "
        "template.",
    ),
    "template_that_fails": (
        json.dumps(REFUSES),
        "ConfigurationError: load_task.chat_template: the template fails on a user message: "
        "TemplateError: the first message must be the system message",
    ),
    "template_without_the_messages": (
        "'{% for m in messages %}<|{{ m.role }}|>{% endfor %}'",
        "ConfigurationError: load_task.chat_template: the template renders '<|user|>' for a user "
        "message 'Is this question in the prompt?'; it must write each message's content",
    ),
}
# No chat_template: what a training user is told, by why a template is needed (the body run).
NO_TEMPLATE = {
    "chat_rows_without_a_template": (
        DPO % "",
        "ConfigurationError: task 'preference': its rows are chat messages, which the model's "
        "chat template renders, and tokenizer 'catwalk::byte_level' (load_task.tokenizer) has "
        "none; give load_task.chat_template (a Jinja template, or a file that holds one; "
        "lib.pipeline and lib.preference pass the model block's), or write the rows as texts",
    ),
    "apply_chat_template_without_a_template": (
        SFT,
        "ConfigurationError: task 'capitals'.apply_chat_template: tokenizer "
        "'catwalk::byte_level' (load_task.tokenizer) has no chat template; give "
        "load_task.chat_template (a Jinja template, or a file that holds one; lib.pipeline and "
        "lib.preference pass the model block's) or leave apply_chat_template out",
    ),
}


@pytest.mark.slow
def test_a_bad_or_missing_template_is_one_line_through_tango_run_before_any_step(tmp_path):
    cases = {}
    for name, (value, line) in BAD_TEMPLATES.items():
        cases[name] = (experiment(tmp_path / name, value), line)
    for name, (body, line) in NO_TEMPLATE.items():
        cases[name] = (experiment(tmp_path / name, "null", body), line)
    argvs = {
        name: tango_command(path, tmp_path / name / "ws", name) for name, (path, _) in cases.items()
    }
    for name, (line, text) in commands.one_line_failures(argvs, tmp_path).items():
        assert cases[name][1] in line, (name, line)
        assert 'Starting step "' not in text, name
        assert not list((tmp_path / name / "ws" / "cache").glob("*")), name


def step_ids(path: Path, overrides: dict | None = None) -> dict[str, str]:
    steps = {f"steps.{key}": value for key, value in (overrides or {}).items()}
    graph = StepGraph.from_params(experiment_params(path, steps)["steps"])
    return {name: step.unique_id for name, step in graph.items()}


def test_the_template_files_content_is_part_of_every_step_it_changes(tmp_path):
    """An edited template file makes other data, another training and other evaluations (not
    'Found output in cache' with prompts of the old template): by the data, and by the model
    block's content (an evaluation of the block on a task, a training whose data the template
    does not render)."""
    block_eval = "{ type: 'catwalk::evaluate', model: model, task: sft }"
    body = RUN + f"+ {{ steps+: {{ block_eval: {block_eval} }} }}"
    path = experiment(tmp_path, None, body)
    before = step_ids(path)
    (tmp_path / "chat.jinja").write_text(TEMPLATE.replace("<|end|>", "<|eot|>"))
    after = step_ids(path)
    changed = {name for name in before if before[name] != after[name]}
    assert {"sft_data", "sft_trained", "sft_eval_untrained", "dpo_data", "block_eval"} <= changed
    # Training on plain data: the template is the model's (saved with it), the data the same.
    plain = {"sft_data.task.apply_chat_template": False, "sft_data.task.until": ["\n"]}
    graphs = [step_ids(path, plain)]
    (tmp_path / "chat.jinja").write_text(TEMPLATE)
    graphs.append(step_ids(path, plain))
    assert graphs[0]["sft_data"] == graphs[1]["sft_data"]
    assert graphs[0]["sft_trained"] != graphs[1]["sft_trained"]
    inline = step_ids(experiment(tmp_path, json.dumps(TEMPLATE)))  # the file's text, inline
    assert inline["sft_data"] == before["sft_data"]  # load_task keeps the text, not the path
