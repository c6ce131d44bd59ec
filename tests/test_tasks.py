"""Task sources: PIQA files and hub rows through one parser, the synthetic task, bad data."""

from __future__ import annotations

from pathlib import Path

import pytest
from tango.common.det_hash import det_hash
from tango.common.exceptions import ConfigurationError

from catwalk_steps.tasks.base import MultipleChoiceInstance, TaskDataError
from catwalk_steps.tasks.piqa import PiqaTask, read_piqa_files
from catwalk_steps.tasks.synthetic import SyntheticTask

from .conftest import PIQA_LABELS, PIQA_ROWS, write_piqa


def test_piqa_files_become_prompted_instances(tmp_path: Path):
    rows = [{**PIQA_ROWS[0], "id": "x1", "extra": [1, 2]}, PIQA_ROWS[1]]
    write_piqa(tmp_path, "train", rows, [0, 1])
    instances = read_piqa_files(tmp_path, "train")
    assert instances == [
        MultipleChoiceInstance(
            context="Question: Keep bread fresh\nAnswer:",
            choices=(" Seal it in a bag.", " Leave it in the sun."),
            label=0,
        ),
        MultipleChoiceInstance(
            context="Question: Open a jar\nAnswer:",
            choices=(" Hit it with a feather.", " Twist the lid hard."),
            label=1,
        ),
    ]


def test_piqa_task_maps_split_names_to_file_stems(tmp_path: Path):
    write_piqa(tmp_path, "train")
    write_piqa(tmp_path, "valid", PIQA_ROWS[:2], PIQA_LABELS[:2])
    splits = PiqaTask(data_dir=str(tmp_path)).load(["train", "validation"])
    assert [len(splits["train"]), len(splits["validation"])] == [4, 2]


def test_piqa_hub_rows_go_through_the_same_parser(monkeypatch):
    import datasets

    rows = [{**row, "label": label} for row, label in zip(PIQA_ROWS, PIQA_LABELS, strict=True)]
    calls = []

    def fake_load_dataset(name, split):
        calls.append((name, split))
        return rows

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is faked: nothing to ask
    instances = PiqaTask().load(["validation"])["validation"]
    assert calls == [("baber/piqa", "validation")]
    assert instances == read_piqa_like(rows)


def read_piqa_like(rows):
    return [
        MultipleChoiceInstance(
            f"Question: {r['goal']}\nAnswer:", (" " + r["sol1"], " " + r["sol2"]), r["label"]
        )
        for r in rows
    ]


def test_hub_row_with_a_bad_label_names_dataset_row_and_field(monkeypatch):
    import datasets

    monkeypatch.setattr(
        datasets, "load_dataset", lambda name, split: [{**PIQA_ROWS[0], "label": -1}]
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is faked: nothing to ask
    with pytest.raises(TaskDataError, match=r"baber/piqa\[test\]:0: field 'label' must be 0 or 1"):
        PiqaTask().load(["test"])


@pytest.mark.parametrize(
    ("jsonl", "labels", "message"),
    [
        (
            '{"goal": "a", "sol1": "b", "sol2": "c"}\n{"goal": "a", "sol1"\n',
            "0\n1\n",
            r"train\.jsonl:2: invalid JSON",
        ),
        ('{"goal": "a", "sol1": "b"}\n', "0\n", r"train\.jsonl:1: missing field 'sol2'"),
        (
            '{"goal": "a", "sol1": "b", "sol2": 3}\n',
            "0\n",
            r"train\.jsonl:1: field 'sol2' must be a string",
        ),
        ('["goal", "sol1"]\n', "0\n", r"train\.jsonl:1: expected a JSON object"),
        (
            '{"goal": "a", "sol1": "b", "sol2": "c"}\n' * 2,
            "0\n2\n",
            r"train-labels\.lst:2: field 'label' must be 0 or 1, got 2",
        ),
        (
            '{"goal": "a", "sol1": "b", "sol2": "c"}\n',
            "yes\n",
            r"train-labels\.lst:1: field 'label' must be 0 or 1, got 'yes'",
        ),
        (
            '{"goal": "a", "sol1": "b", "sol2": "c"}\n' * 3,
            "0\n1\n",
            r"train-labels\.lst: 2 labels for 3 rows in train\.jsonl",
        ),
    ],
    ids=[
        "invalid-json",
        "missing-field",
        "wrong-type",
        "not-object",
        "label-2",
        "label-word",
        "count-mismatch",
    ],
)
def test_bad_piqa_data_fails_with_file_line_and_field(tmp_path, jsonl, labels, message):
    (tmp_path / "train.jsonl").write_text(jsonl)
    (tmp_path / "train-labels.lst").write_text(labels)
    with pytest.raises(TaskDataError, match=message) as error:
        PiqaTask(data_dir=str(tmp_path)).load(["train"])
    assert str(tmp_path) in str(error.value)
    assert "\n" not in str(error.value)


def test_empty_split_is_an_error(tmp_path: Path):
    (tmp_path / "train.jsonl").write_text("\n")
    (tmp_path / "train-labels.lst").write_text("")
    with pytest.raises(TaskDataError, match=r"train\.jsonl: split 'train' is empty"):
        PiqaTask(data_dir=str(tmp_path)).load(["train"])


def test_unknown_split_and_missing_files_are_named(tmp_path: Path):
    write_piqa(tmp_path, "train")
    with pytest.raises(TaskDataError, match=r"unknown split 'dev' \(known: train, validation\)"):
        PiqaTask(data_dir=str(tmp_path)).load(["dev"])
    with pytest.raises(TaskDataError, match=r"valid\.jsonl: file not found"):
        PiqaTask(data_dir=str(tmp_path)).load(["validation"])
    with pytest.raises(TaskDataError, match=r"nowhere: PIQA data directory not found"):
        PiqaTask(data_dir=str(tmp_path / "nowhere")).load(["train"])
    with pytest.raises(TaskDataError, match=r"baber/piqa: unknown split 'dev'"):
        PiqaTask().load(["dev"])


def test_local_piqa_cache_identity_follows_file_content(tmp_path: Path):
    write_piqa(tmp_path, "train")
    before = det_hash(PiqaTask(data_dir=str(tmp_path)))
    assert det_hash(PiqaTask(data_dir=str(tmp_path))) == before
    write_piqa(tmp_path, "train", PIQA_ROWS, [1, 1, 0, 0])
    assert det_hash(PiqaTask(data_dir=str(tmp_path))) != before


def test_synthetic_task_is_deterministic_and_balanced():
    first = SyntheticTask(seed=3).load(["train", "validation"])
    again = SyntheticTask(seed=3).load(["train", "validation"])
    other = SyntheticTask(seed=4).load(["train"])
    assert first == again
    assert first["train"] != other["train"]
    assert first["train"] != first["validation"][: len(first["train"])]
    labels = [instance.label for instance in first["train"]]
    assert all(0.18 < labels.count(label) / len(labels) < 0.32 for label in range(4))
    for instance in first["train"][:50]:
        assert len(instance.choices) == 4 and len(set(instance.choices)) == 4
        assert instance.context.startswith("Question: ") and instance.context.endswith("Answer:")


def test_synthetic_task_answers_follow_one_hidden_mapping():
    task = SyntheticTask(seed=0)
    answers = {}
    for instance in task.load(["train"])["train"]:
        key = instance.context.split("with ")[1].split("?")[0]
        answers.setdefault(key, set()).add(instance.choices[instance.label])
    assert all(len(values) == 1 for values in answers.values())
    assert len(answers) == task.num_keys


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"num_choices": 9, "num_attributes": 8},
            "task.num_choices: must be between 2 and num_attributes (8), got 9",
        ),
        ({"num_keys": 0}, "task.num_keys: must be a whole number >= 1, got 0"),
        ({"num_attributes": "8"}, "task.num_attributes: must be a whole number >= 1, got '8'"),
        (
            # More words than two syllables can make: fails at once instead of looping forever.
            {"num_keys": 5000},
            "task.num_keys + task.num_attributes: at most 4900 distinct made-up words exist",
        ),
        ({"sizes": {"train": -1}}, "task.sizes.train: must be a whole number >= 0, got -1"),
    ],
)
def test_bad_synthetic_settings_are_configuration_errors(kwargs, message):
    with pytest.raises(ConfigurationError) as error:
        SyntheticTask(**kwargs)
    assert str(error.value).startswith(message)


def test_synthetic_task_can_use_every_word_it_can_make():
    task = SyntheticTask(num_keys=4892, num_attributes=8, sizes={"train": 1})
    assert len(set(task.keys) | set(task.attributes)) == 4900


def test_synthetic_task_rejects_bad_splits():
    with pytest.raises(TaskDataError, match="unknown split 'dev'"):
        SyntheticTask().load(["dev"])
    with pytest.raises(TaskDataError, match="split 'train' is empty"):
        SyntheticTask(sizes={"train": 0}).load(["train"])


def test_a_task_type_reachable_by_its_name_says_so_and_no_two_know_one_name():
    """Task types answer for the names they know (`Task.block_named`), asked in the registry's
    order: no list filled by import order decides which type a name is, because no name is
    known by two types."""
    from catwalk_steps.tasks.base import other_task_type, task_types
    from catwalk_steps.tasks.olmo_eval_labels import olmo_eval_labels

    names = ["gsm8k", "nq_open", "triviaqa", *olmo_eval_labels(), "olmo_eval:arc_easy"]
    for name in names:
        knowing = [t for t in task_types() if t.block_named(name, {}) is not None]
        assert len(knowing) <= 1, (name, knowing)  # (`piqa` is lm-eval's: none knows it)
    assert other_task_type("gsm8k", {"limit": 2}) == {
        "limit": 2,
        "type": "catwalk::generative",
        "name": "gsm8k",
    }
    assert other_task_type("arc_easy_rc_5shot", {"source": "hub"}) == {
        "type": "catwalk::olmo_eval",
        "label": "arc_easy_rc_5shot",
    }
    assert other_task_type("arc_easy", {}) is None  # lm-eval's: catwalk::task's own
