"""Perplexity against lm-evaluation-harness 0.4.13 (tests/fixtures/lm_eval_perplexity.json, made
by tests/fixtures/make_perplexity_fixture.py): the same rolling windows, the same documents
scored (wikitext's pages detokenized, words and bytes counted before), every document's
log-likelihood to 1e-6 and the three metrics as lm-eval aggregates them, with no standard error
(lm-eval's "N/A"). Then the batches an engine runs (ranks in lockstep, padding), the in-loop
sums, the stored form, and the task's keys. (In the loop under DDP, FairScale FSDP and FSDP2:
tests/test_sharded_training.py; bad inputs through `tango run`: test_perplexity_bad_inputs.py.)"""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from tango.common import DatasetDict
from tango.common.exceptions import ConfigurationError

from catwalk_steps.kinds import Scorer, kind_named
from catwalk_steps.kinds.collate import Collator, Padding
from catwalk_steps.kinds.perplexity import (
    corpus_metrics,
    rolling_windows,
)
from catwalk_steps.kinds.stored import StoredSplit
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.sequences import SequenceEncoder
from catwalk_steps.settings import FP32
from catwalk_steps.tasks import PerplexityInstance, PerplexityTask, Task
from catwalk_steps.tasks.base import TaskDataError
from catwalk_steps.tasks.perplexity import wikitext_detokenized
from catwalk_steps.workspace.formats import InstancesFormat

from .distributed import OthersStillGoing

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))

from generation_model import build, checksum  # noqa: E402

FIXTURE = json.loads((FIXTURES / "lm_eval_perplexity.json").read_text())
KIND = kind_named("perplexity")
METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")
RELATIVE = 1e-6


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> RankClassifier:
    directory = build(tmp_path_factory.mktemp("perplexity") / "model")
    assert checksum(directory) == pytest.approx(FIXTURE["checksum"], rel=1e-12)  # lm-eval's model
    return RankClassifier(pretrained=str(directory)).eval()


def options(max_length: int, batch_size: int = 3) -> dict:
    return {"batch_size": batch_size, "max_length": max_length, "device": "cpu"} | {
        "precision": FP32,
        "progress": False,
    }


def corpus(tmp_path: Path, rows: list[dict], **keys) -> PerplexityTask:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    block = {"type": "catwalk::perplexity", "name": "own", "data_files": {"test": str(path)}}
    task = Task.from_params({**block, **keys})
    assert isinstance(task, PerplexityTask)
    return task


def lm_eval_metrics(results: dict) -> dict:
    return {name: results[f"{name},none"] for name in METRICS}


def check_against(instances, answers, expected: dict) -> float:
    """Every document's request, words, bytes and log-likelihood (1e-6 relative) and the three
    metrics against lm-eval's: from its own items exactly, from ours to the same 1e-6 (a
    perplexity's exponent, -sum ll / words: float32 sums of a window differ in their last bit,
    which the exponential multiplies by about 13 here); the largest relative difference of a
    log-likelihood."""
    worst = 0.0
    for instance, answer, row in zip(instances, answers, expected["documents"], strict=True):
        assert instance.text == row["request"], row["doc_id"]
        assert (instance.word_count, instance.byte_count) == (row["words"], row["bytes"])
        difference = abs(answer["loglikelihood"] - row["loglikelihood"]) / abs(row["loglikelihood"])
        assert difference <= RELATIVE, (row["doc_id"], answer, row)
        worst = max(worst, difference)
    result = KIND.result(instances, answers, None)
    theirs = lm_eval_metrics(expected["results"])
    for name in METRICS:  # a perplexity by its exponent: what the log-likelihoods' 1e-6 bounds
        ours, its = (
            (result[name], theirs[name])
            if name == "bits_per_byte"
            else (math.log(result[name]), math.log(theirs[name]))
        )
        assert ours == pytest.approx(its, rel=RELATIVE), name
        assert result[f"{name}_stderr"] is None  # lm-eval: "N/A"
        assert expected["results"][f"{name}_stderr,none"] == "N/A"
    # lm-eval's aggregation of its own items: the same numbers, exactly.
    items = expected["documents"]
    summed = [sum(r[key] for r in items) for key in ("loglikelihood", "words", "bytes")]
    assert corpus_metrics(*summed) == theirs
    return worst


@pytest.mark.parametrize("case", range(len(FIXTURE["windows"])))
def test_rolling_windows_are_lm_evals(case):
    """lm-eval's windows for a `context_len` c are those of stride max_length + 1 - c; each
    window as lm-eval's (context, continuation) pair."""
    spec = FIXTURE["windows"][case]
    length = spec["max_seq_len"]
    stride = length + 1 - spec["context_len"]
    ours = rolling_windows(spec["tokens"], spec["prefix"], length, stride)
    pairs = [[list(ids[:-n]), list(ids[-n:])] for ids, n in ours]
    assert pairs == spec["windows"]
    if spec["context_len"] == 1:  # lm-eval's `hf` model: the default, no stride given
        assert rolling_windows(spec["tokens"], spec["prefix"], length) == ours


def test_wikitext_pages_score_as_lm_evals_wikitext(model, tmp_path):
    """lm-eval's `wikitext` on pages in wikitext-2-raw's form (its dataset read from a file here,
    the hub being offline): the pages detokenized as it does, their words and bytes counted
    before, each log-likelihood within 1e-6, the metrics as it aggregates them."""
    expected = FIXTURE["wikitext"]
    task = corpus(tmp_path, [{"page": page} for page in expected["pages"]], name="wikitext")
    assert (task.text_field, task.detokenizer, task.evaluation_split()) == (
        "page",
        "wikitext",
        "test",
    )
    instances = task.evaluation_instances()
    answers = KIND.answers(model, instances, options(expected["max_length"]))
    worst = check_against(instances, answers, expected)
    print(f"wikitext: largest relative difference of a page's log-likelihood {worst:.2e}")


@pytest.mark.parametrize("length", sorted(FIXTURE["own"]["runs"]))
def test_a_corpus_of_ones_own_scores_as_lm_evals_loglikelihood_rolling(model, tmp_path, length):
    """Documents of one's own (BoolQ passages, a 700-token one, whitespace at both ends, non-ASCII
    bytes) at max_length 64 and 17: tokens as lm-eval's `tok_encode`, windows, each document's
    log-likelihood within 1e-6 of lm-eval's, the metrics."""
    own = FIXTURE["own"]
    instances = corpus(tmp_path, [{"text": text} for text in own["texts"]]).evaluation_instances()
    answers = KIND.answers(model, instances, options(int(length)))
    assert [a["tokens"] for a in answers] == [len(t) for t in own["tokens"]]
    encoder = SequenceEncoder(model.tokenizer, int(length))
    assert encoder.prefix_id == own["prefix_token_id"]
    assert max(a["windows"] for a in answers) > 10  # windows rolled
    worst = check_against(instances, answers, own["runs"][length])
    print(f"own corpus at {length}: largest relative difference {worst:.2e}")


def test_windows_under_an_engine_run_in_lockstep_and_equal_one_device(model, tmp_path):
    """The batches an engine runs (the collate's windows, a batch's rows a forward, padding
    weighs nothing and runs no window, stand-ins while another rank is not done): each
    document's answer equals the one-device scores; the in-loop sums compute the result's
    metrics."""
    own = FIXTURE["own"]
    instances = corpus(tmp_path, [{"text": t} for t in own["texts"]]).evaluation_instances()
    alone = KIND.answers(model, instances, options(64))
    collate = Collator(model.spec["pretrained"], max_length=64)
    forwards = []

    def forward(batch):
        forwards.append(batch["windows"]["input_ids"].shape[0])
        return model(**batch)

    sums: dict[str, float] = {}
    for start in range(0, len(instances), 4):
        items = instances[start : start + 4]
        batch = collate([*items, Padding(items[0])])  # a stand-in, as a rank's share is padded
        assert len({s.instance for s in batch.sequences}) == len(items)  # none for the padding
        scorer, before = Scorer(forward, model, OthersStillGoing(2)), len(forwards)
        rows = KIND.batch_answers(scorer, batch, items)[: len(items)]
        # its windows a batch's rows (its documents) at a time, then two stand-ins while the
        # other rank runs
        assert len(forwards) - before == math.ceil(len(batch.sequences) / batch.rows) + 2
        assert forwards[-2:] == [1, 1]
        for mine, theirs in zip(rows, alone[start:], strict=False):
            assert mine["tokens"] == theirs["tokens"] and mine["windows"] == theirs["windows"]
            assert mine["loglikelihood"] == pytest.approx(theirs["loglikelihood"], rel=1e-6)
        for key, value in KIND.update(Scorer(forward, model), batch).items():
            sums[key] = sums.get(key, 0.0) + value
    assert max(forwards) == 5
    in_loop = KIND.compute(sums, instances)
    result = KIND.result(instances, alone, None)
    assert in_loop["count"] == result["n"] == len(instances)
    for name in METRICS:
        assert in_loop[name] == pytest.approx(result[name], rel=1e-6)
        assert in_loop[f"{name}_stderr"] is None


def test_records_keep_each_documents_items_and_answers_read_back():
    instances = [PerplexityInstance("a b", 2, 3), PerplexityInstance("cd", 1, 2, stride=8)]
    answers = [
        {"loglikelihood": -4.5, "tokens": 2, "windows": 1},
        {"loglikelihood": -1.25, "tokens": 1, "windows": 1},
    ]
    [first, second] = KIND.records(instances, answers, None)
    assert first == {
        "doc": 0,
        "request": {"text": "a b"},
        "answer": answers[0],
        "metrics": {
            "word_perplexity": [-4.5, 2],
            "byte_perplexity": [-4.5, 3],
            "bits_per_byte": [-4.5, 3],
        },
    }
    assert second["metrics"]["word_perplexity"] == [-1.25, 1]
    result = KIND.result(instances, answers, None)
    assert result["word_perplexity"] == math.exp(5.75 / 3)
    assert result["bits_per_byte"] == 5.75 / 5 / math.log(2)
    assert KIND.summary(result) == (*METRICS, "n") and KIND.shown(result, "acc") == METRICS[0]
    assert all(KIND.is_answer(i, a) for i, a in zip(instances, answers, strict=True))
    for bad in ([-4.5], {"loglikelihood": -4.5}, {**answers[0], "tokens": 2.0}, "x"):
        assert not KIND.is_answer(instances[0], bad), bad
    assert KIND.lower_is_better("bits_per_byte") and KIND.owns({"word_perplexity": 3.0})


def test_the_stored_form_reads_back_equal(tmp_path):
    instances = [
        PerplexityInstance(" = Title =\n\nText, with ☕.", 5, 27),
        PerplexityInstance("x", 1, 1, stride=4),
    ]
    columns = KIND.columns
    rows = pa.RecordBatch.from_pylist([columns.row(i) for i in instances], schema=columns.schema)
    assert [columns.instance(row, "x") for row in rows.to_pylist()] == instances
    InstancesFormat().write(DatasetDict(splits={"test": instances}, metadata={}), tmp_path)
    stored = InstancesFormat().read(tmp_path)["test"]
    assert isinstance(stored, StoredSplit) and list(stored) == instances
    assert [KIND.decode(KIND.encode(i), "x") for i in instances] == instances


def test_wikitext_by_name_reads_the_hub_and_a_corpus_of_ones_own_its_files(tmp_path):
    wikitext = Task.from_params("wikitext")
    assert isinstance(wikitext, PerplexityTask) and wikitext.evaluation_split() == "test"
    assert wikitext.source.identity() == (
        "hub",
        "EleutherAI/wikitext_document_level",
        "wikitext-2-raw-v1",
    )
    own = corpus(tmp_path, [{"body": " one  two "}], text_field="body", stride=3)
    [document] = own.evaluation_instances()
    assert document == PerplexityInstance(" one  two ", 4, 10, 3)  # lm-eval's words: 4
    assert (
        own.det_hash_object()
        != corpus(tmp_path, [{"body": "x"}], text_field="body").det_hash_object()
    )
    assert wikitext_detokenized(" a @-@ b , c ( d ) 's \n e ") == " a-b, c (d)'s\ne "


class SilentOnSpaces:
    """A tokenizer that makes no token of whitespace (as some normalising ones do)."""

    bos_token_id, eos_token_id, pad_token_id = None, 0, 0

    def decode(self, ids):
        return "<eos>"

    def __call__(self, texts, add_special_tokens=True):
        if isinstance(texts, str):
            return {"input_ids": [ord(c) for c in texts if not c.isspace()]}
        return {"input_ids": [[ord(c) for c in t if not c.isspace()] for t in texts]}


def test_a_document_of_no_tokens_and_a_stride_past_max_length_are_refused_before_any_forward():
    documents = [PerplexityInstance("words", 1, 5), PerplexityInstance(" \n ", 3, 3)]
    with pytest.raises(TaskDataError) as refused:
        KIND.check_requests("task 'c'", documents, lambda: (SilentOnSpaces(), 16, "x"))
    assert str(refused.value) == (
        "task 'c': document 1 has no tokens (' \\n '); a document is a text of at least one token"
    )
    long = [PerplexityInstance("words", 1, 5, stride=17)]
    with pytest.raises(ConfigurationError, match=r"^task 'c'.stride: 17 tokens, more than x 16"):
        KIND.check_requests("task 'c'", long, lambda: (SilentOnSpaces(), 16, "x"))
    KIND.check_requests("task 'c'", documents[:1], lambda: (SilentOnSpaces(), 16, "x"))


@pytest.mark.distributed
def test_two_devices_under_fsdp2_give_the_one_device_loglikelihoods(tmp_path):
    """`catwalk::evaluate`'s scores on 2 workers under FSDP2 (each its share of documents,
    their windows in lockstep through the root wrapper, stand-ins where a rank has fewer): each
    document's answer as on one device."""
    from tango.common import Lazy, Params
    from tango.integrations.torch import TrainingEngine

    from catwalk_steps.evaluation import (
        ConfiguredModel,
        EvaluationSettings,
        evaluation_scores,
        model_block,
    )

    from .conftest import TINY_GPT2

    texts = [t for t in FIXTURE["own"]["texts"]] + ["Short.", "x" * 300]
    instances = corpus(tmp_path, [{"text": t} for t in texts]).evaluation_instances()
    directory = tmp_path / "model"
    RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level", init_seed=3).save_pretrained(
        directory
    )
    want = KIND.answers(RankClassifier(pretrained=str(directory)), instances, options(128, 4))
    source = ConfiguredModel(
        model_block({"type": "catwalk::rank_classifier", "pretrained": str(directory)})
    )
    engine = Lazy(TrainingEngine, Params({"type": "catwalk::torch_fsdp"}))
    settings = EvaluationSettings(batch_size=2, device="cpu", device_count=2, engine=engine)
    step = SimpleNamespace(unique_id="evaluate-test", name="evaluate", work_dir=tmp_path / "w")
    got, length = evaluation_scores(source, instances, settings, step, logging.getLogger())
    assert length == 128 and len(got) == len(want) and max(a["windows"] for a in want) > 5
    for mine, theirs in zip(got, want, strict=True):
        assert (mine["tokens"], mine["windows"]) == (theirs["tokens"], theirs["windows"])
        assert mine["loglikelihood"] == pytest.approx(theirs["loglikelihood"], rel=1e-5)
