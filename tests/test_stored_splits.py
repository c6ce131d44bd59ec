"""A task's splits as `catwalk::load_task` stores them (issue 56): each kind's instances as Arrow
columns and back equal, awkward fields included; a stored split as a sequence decoded by index
(length, slices, iteration, its kind, pickled without its rows); its fingerprint, computed as it
was written, equal to `dataset_fingerprint` (what checkpoints' manifests compare); the JSON form
of older results read back; a damaged file one line naming it; a failed write leaving nothing.
Through `tango run`: tests/test_data_scale.py, test_dpo_training.py (an edited number)."""

from __future__ import annotations

import json
import logging
import pickle

import pyarrow as pa
import pytest
from tango.common import DatasetDict

from catwalk_steps.checkpoints.run_identity import data_identity
from catwalk_steps.kinds import kind_named, kind_of
from catwalk_steps.kinds.stored import StoredSplit, data_fingerprint
from catwalk_steps.kinds.storing import StreamedSplits
from catwalk_steps.sealed import AlteredFileError, write_digests
from catwalk_steps.tasks import MultipleChoiceInstance, OlmoEvalInstance, dataset_fingerprint
from catwalk_steps.tasks.answers import AnswerScoring
from catwalk_steps.tasks.base import TaskDataError
from catwalk_steps.tasks.generation import GenerationInstance
from catwalk_steps.tasks.preference import PreferenceInstance
from catwalk_steps.workspace import instances as stored_form
from catwalk_steps.workspace.formats import InstancesFormat

SCORING = AnswerScoring.of(
    [{"name": "digits", "filter": [{"function": "regex", "regex_pattern": r"(\d+)"}]}],
    [{"metric": "exact_match", "ignore_case": True, "regexes_to_ignore": [",", "\\$"]}],
    "task 't'",
)
# Each kind's instances, with the fields that are one thing or another, empty or absent.
INSTANCES = {
    "multiple_choice": [
        MultipleChoiceInstance("Q: où?\nA:", (" ici", " là"), 1),
        MultipleChoiceInstance(("The cup", "The jug"), (" is full.", " is full."), 0, (7, 7)),
        MultipleChoiceInstance("", (" x",), 0, None, "high_school_physics"),
    ],
    "olmo_eval": [
        OlmoEvalInstance("c", (" y", " z"), 1, metric="pmi_dc", unconditioned="Answer:"),
        OlmoEvalInstance(" ", (" y",), 0, metric="bpb", conditioned=False),
    ],
    "generative": [
        GenerationInstance("Q: 2+2?\nA:", ("4", "four"), ("\n", "Q:"), 16, SCORING, " 4\n"),
        GenerationInstance("Q: none?", (), (), 1, SCORING, None, no_answer="f.jsonl:2: empty"),
        GenerationInstance("Q: train", ("yes",), ("\n",), 8, SCORING, " yes\n", training=True),
    ],
    "preference": [
        PreferenceInstance("Q: one?\nA:", " yes", " no"),
        PreferenceInstance("<|user|>hi", "<|a|>hello", "<|a|>go", (-12.345678901234567, -0.1)),
    ],
}


@pytest.mark.parametrize("kind", sorted(INSTANCES))
def test_each_kind_s_instances_round_trip_through_its_columns(tmp_path, kind):
    """Instance -> row -> Arrow -> row -> instance: equal, field by field (a generative
    request's scoring too); and through a stored file."""
    instances = INSTANCES[kind]
    columns = kind_named(kind).columns
    rows = [columns.row(instance) for instance in instances]
    back = pa.RecordBatch.from_pylist(rows, schema=columns.schema).to_pylist()
    assert [columns.instance(row, "x") for row in back] == instances
    data = DatasetDict(splits={"test": instances}, metadata={"task": "t"})
    InstancesFormat().write(data, tmp_path)
    stored = InstancesFormat().read(tmp_path)["test"]
    assert isinstance(stored, StoredSplit) and kind_of(stored) is kind_named(kind)
    assert list(stored) == instances
    if kind == "generative":
        assert stored[0].score("It is 4.")["scores"] == {"exact_match,digits": 1.0}


def many(count: int) -> list[MultipleChoiceInstance]:
    return [MultipleChoiceInstance(f"Q{i}", (f" a{i}", f" b{i}"), i % 2) for i in range(count)]


def stored(tmp_path, instances: list, name: str = "train") -> StoredSplit:
    tmp_path.mkdir(exist_ok=True)
    InstancesFormat().write(DatasetDict(splits={name: instances}, metadata={}), tmp_path)
    return InstancesFormat().read(tmp_path)[name]


def test_a_stored_split_is_a_sequence_decoded_by_index(tmp_path):
    instances = many(2500)  # more than one batch written, and read
    split = stored(tmp_path, instances)
    assert len(split) == 2500 and split[1234] == instances[1234] and split[-1] == instances[-1]
    with pytest.raises(IndexError):
        split[2500]
    view = split[10:20:3]
    assert isinstance(view, StoredSplit) and list(view) == instances[10:20:3]
    assert list(split[2000:][:5]) == instances[2000:2005]
    assert list(split) == instances and split == instances and split != instances[:-1]
    assert kind_of(split[:1]).name == "multiple_choice"


def test_a_pickled_split_carries_where_its_rows_are_never_the_rows(tmp_path):
    """What a training job sends each worker: the same size for 10 rows and 5,000, no row's
    text in it; unpickled, it reads the same file."""
    small, large = stored(tmp_path / "a", many(10)), stored(tmp_path / "b", many(5000))
    sizes = [len(pickle.dumps(split)) for split in (small, large)]
    assert abs(sizes[0] - sizes[1]) < 8 and sizes[1] < 600, sizes
    assert b"Q4999" not in pickle.dumps(large)
    again = pickle.loads(pickle.dumps(large[100:].replaced(label=0)))
    assert again[0] == MultipleChoiceInstance("Q100", (" a100", " b100"), 0)


def test_the_stored_fingerprint_is_today_s_dataset_fingerprint(tmp_path):
    """Computed as the split was written: checkpoints' manifests written before compare equal,
    and no row is read for it (a split that is not stored is hashed as before)."""
    instances = INSTANCES["generative"] + INSTANCES["generative"]
    split = stored(tmp_path, instances)
    assert split.fingerprint == dataset_fingerprint({"train": instances})
    data = {"train": split}
    assert data_identity(data, "train", "t") == data_identity({"train": instances}, "train", "t")
    assert data_fingerprint(data) == data_fingerprint({"train": instances})
    assert split[1:].fingerprint is None and split.replaced(training=True).fingerprint is None


def test_a_generative_split_trains_as_a_view_and_names_a_row_without_a_target(tmp_path):
    split = stored(tmp_path, INSTANCES["generative"])
    kind = kind_of(split)
    trained = kind.training_instances(split[::2], "train")
    assert isinstance(trained, StoredSplit)
    assert [i.training for i in trained] == [True, True] and trained[1].answer == " yes\n"
    with pytest.raises(TaskDataError) as error:
        kind.training_instances(split, "train: task 't', split 'train'")
    assert str(error.value) == (
        "train: task 't', split 'train': instance 2 has no target to train on (f.jsonl:2: "
        "empty); a generative task trains on its first target"
    )


def test_a_result_stored_as_json_before_reads_back_whole_said_once(tmp_path, monkeypatch, caplog):
    """A `load_task` result of the JSON form (`instances.json`) reads back as it did."""
    monkeypatch.setattr(stored_form, "_said_legacy", [])
    splits = {kind: instances for kind, instances in INSTANCES.items()}
    for name in ("one", "two"):
        encoded = {k: [kind_named(k).encode(i) for i in v] for k, v in splits.items()}
        (tmp_path / name).mkdir()
        (tmp_path / name / "instances.json").write_text(
            json.dumps({"metadata": {"task": "t"}, "splits": encoded})
        )
        write_digests(tmp_path / name, ["instances.json"])
    with caplog.at_level(logging.WARNING):
        read = [InstancesFormat().read(tmp_path / name) for name in ("one", "two")]
    assert all(data.splits == splits and data.metadata == {"task": "t"} for data in read)
    said = [r.getMessage() for r in caplog.records if "before task results" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"{tmp_path / 'one' / 'instances.json'}: ")


@pytest.mark.parametrize("damage", ["edited", "cut", "gone", "record"])
def test_a_damaged_stored_split_is_one_line_naming_it(tmp_path, damage):
    stored(tmp_path, INSTANCES["preference"])
    path = tmp_path / "train.arrow"
    if damage == "edited":  # a reference log-probability changed, the length the same
        value = pa.array([-12.345678901234567], pa.float64()).buffers()[1].to_pybytes()
        other = pa.array([-1000.0], pa.float64()).buffers()[1].to_pybytes()
        path.write_bytes(path.read_bytes().replace(value, other))
    elif damage == "cut":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "gone":
        path.unlink()
    else:
        path = tmp_path / "splits.json"
        path.write_text(path.read_text().replace('"rows": 2', '"rows": 3'))
    with pytest.raises((AlteredFileError, ValueError)) as error:
        InstancesFormat().read(tmp_path)
    line = str(error.value)
    assert line.startswith(f"{path}: ") and "\n" not in line, line


def test_a_split_that_fails_as_it_is_read_leaves_nothing(tmp_path):
    """The load step writes rows as the task reads them: a bad row half-way (one line, the
    task's) leaves no file of the result behind."""

    def rows():
        yield from many(5000)
        raise TaskDataError("rows.jsonl:5001: invalid JSON")

    streams = iter([("validation", many(3)), ("train", rows())])
    data = StreamedSplits(streams, {"task": "t"})
    with pytest.raises(TaskDataError, match="rows.jsonl:5001"):
        InstancesFormat().write(data, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "text",
    ["Q: {{q}}\nA:", "{{ q }}", "a {{q}}\r\nb\r", "", "plain text.", "{{q}}{{a}}", "{{ q }} }} {"],
)
def test_a_template_of_text_and_fields_renders_as_jinja_renders_it(text):
    """The load step renders every row: a template of text and bare fields alone is filled in
    without Jinja (a tenth of its cost), the same text for every kind of value, the same error
    for a field the row lacks; any other template is Jinja's."""
    import jinja2

    from catwalk_steps.tasks.templates import ENVIRONMENT, Template, TemplateError

    template = Template(text, "prompt")
    assert template.parts is not None
    for value in ["x", None, 1, [1, "a"], {"k": 2}, True, 1.5, "é\n", ""]:
        row = {"q": value, "a": "A"}
        assert template.apply(row) == ENVIRONMENT.from_string(text).render(row), value
    if "q" in text:
        with pytest.raises(TemplateError) as ours:
            template.apply({"a": "A"})
        with pytest.raises(jinja2.UndefinedError) as theirs:
            ENVIRONMENT.from_string(text).render({"a": "A"})
        assert str(ours.value) == str(theirs.value) == "'q' is undefined"
    for other in ("{{q|upper}}", "{% if q %}x{% endif %}", "{{ range }}", "x {# c #}"):
        assert Template(other, "prompt").parts is None
