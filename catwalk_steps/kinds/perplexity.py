"""Perplexity (lm-evaluation-harness 0.4.13's `loglikelihood_rolling` tasks: wikitext, a corpus of
one's own): each document's log-likelihood, summed over rolling windows of the model's
`max_length` (:func:`rolling_windows`), and the corpus's `word_perplexity`, `byte_perplexity`
and `bits_per_byte`, weighted by words and bytes as lm-eval aggregates them
(:func:`corpus_metrics`).

lm-eval reports no standard error for these (its `weighted_perplexity` and `bits_per_byte`
aggregations have none: "N/A"); a result and an in-loop point carry `<metric>_stderr: None`.

Under an engine (in the loop, a sharded evaluation) a batch of documents is its windows, at most
as many per forward as the batch has documents; ranks holding fewer windows run stand-ins until
every rank is done (`Scorer.ranks`), so all run the same forwards through the root wrapper.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import pyarrow as pa
import torch
from tango.common.exceptions import ConfigurationError

from ..metrics.records import RECORDS, stderr_key
from ..scoring.choices import evaluating, sequence_batch_scores
from ..scoring.sequences import ChoiceSequence, SequenceEncoder, pad_sequences
from ..scoring.tokenization import Known, tokenize_keys
from ..tasks.base import TaskDataError
from ..tasks.perplexity import PerplexityInstance
from .base import ResultContext, Scorer, TaskKind, register, tupled
from .columns import Columns

METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")
WINDOWS = "windows"  # the model's forward for a batch of windows (RankClassifier.forward)


def rolling_windows(
    tokens: Sequence[int], prefix_id: int, max_length: int, stride: int | None = None
) -> list[tuple[tuple[int, ...], int]]:
    """A document's windows as lm-eval 0.4.13 scores them (`get_rolling_token_windows`, then
    `make_disjoint_window`): (a window's tokens, how many of its last the model predicts). The
    model reads all of a window but its last token, and predicts every token of the document
    once. The first window is lm-eval's prefix token (BOS, else EOS) and the first `max_length`
    tokens, all predicted; each next one predicts the next `stride` tokens after as many before
    them as fill `max_length` positions. lm-eval's `context_len` c is `stride` max_length + 1 -
    c: its HF model's 1 is `stride` max_length (the default), disjoint windows."""
    step = stride or max_length
    if not tokens:
        return []
    first = min(max_length, len(tokens))
    windows = [((prefix_id, *tokens[:first]), first)]
    done = first
    while done < len(tokens):
        count = min(step, len(tokens) - done)
        end = done + count
        windows.append((tuple(tokens[end - max_length - 1 : end]), count))  # done >= max_length
        done = end
    return windows


def corpus_metrics(loglikelihood: float, words: float, utf8_bytes: float) -> dict[str, float]:
    """lm-eval's aggregations of (log-likelihood, weight) pairs, from their sums:
    `weighted_perplexity` (`exp(-sum ll / sum words)`, per byte the same) and `bits_per_byte`
    (`-(sum ll / sum bytes) / ln 2`)."""
    return {
        "word_perplexity": math.exp(-(loglikelihood / words)),
        "byte_perplexity": math.exp(-(loglikelihood / utf8_bytes)),
        "bits_per_byte": -(loglikelihood / utf8_bytes) / math.log(2),
    }


def without_stderrs() -> dict[str, None]:
    """lm-eval has no standard error for the three (it writes "N/A")."""
    return {stderr_key(name): None for name in METRICS}


@dataclass(frozen=True)
class DocumentWindows:
    """Documents as the windows of their tokens: each window a sequence (`instance` its
    document, `choice` its place), each document's tokens counted; a document of weight 0
    (padding) has none. `rows`: windows per forward."""

    documents: list[PerplexityInstance]
    weights: list[float]
    sequences: list[ChoiceSequence]
    tokens: list[int]
    pad_id: int
    rows: int


def document_windows(
    encoder: SequenceEncoder, documents: list, weights: list[float], known: Known | None = None
) -> DocumentWindows:
    """The documents' windows in `encoder.max_length`, tokenized as lm-eval's `tok_encode`
    (the tokenizer's special tokens, unless a text starts with the prefix token)."""
    keys = [encoder.key(document.text) for document in documents]
    found = known if known is not None else tokenize_keys(encoder.tokenizer, keys)
    sequences, counts = [], []
    for index, (document, key, weight) in enumerate(zip(documents, keys, weights, strict=True)):
        tokens = found[key]
        counts.append(len(tokens))
        if weight > 0:
            windows = rolling_windows(
                tokens, encoder.prefix_id, encoder.max_length, document.stride
            )
            for place, (ids, predicted) in enumerate(windows):
                sequences.append(ChoiceSequence(ids, predicted, index, place, 0))
    pad_id = encoder.tokenizer.pad_token_id
    return DocumentWindows(documents, weights, sequences, counts, pad_id, max(1, len(documents)))


def lockstep_scores(scorer: Scorer, batch: DocumentWindows) -> list[float]:
    """Each window's summed log-probability, `batch.rows` windows a forward (the longest
    first); a rank with none left runs a stand-in until no rank has any. Collective where the
    scorer's ranks are."""
    order = sorted(range(len(batch.sequences)), key=lambda k: -len(batch.sequences[k].token_ids))
    scores = [0.0] * len(batch.sequences)
    stand_in = ChoiceSequence((batch.pad_id, batch.pad_id), 1, 0, 0, 0)
    start = 0
    while scorer.ranks.any(start < len(order)):
        chosen = order[start : start + batch.rows]
        run = [batch.sequences[k] for k in chosen] or [stand_in]
        outputs = scorer.forward({WINDOWS: pad_sequences(run, batch.pad_id)})
        for k, value in zip(chosen, outputs["scores"].float().cpu().tolist(), strict=False):
            scores[k] = value
        start += batch.rows
    return scores


def document_answers(batch: DocumentWindows, scores: Sequence[float]) -> list[dict[str, Any]]:
    """Each document's answer: its log-likelihood (its windows' scores added in their order, as
    lm-eval adds them), its tokens and windows."""
    totals = [0.0] * len(batch.documents)
    windows = [0] * len(batch.documents)
    for sequence, score in zip(batch.sequences, scores, strict=True):
        totals[sequence.instance] += score
        windows[sequence.instance] += 1
    return [
        {"loglikelihood": total, "tokens": tokens, "windows": count}
        for total, tokens, count in zip(totals, batch.tokens, windows, strict=True)
    ]


def perplexity_records(instances: Sequence[Any], answers: Sequence[Any]) -> list[dict[str, Any]]:
    """Each document's record (:mod:`~catwalk_steps.metrics.records`): its text, its answer,
    and per metric lm-eval's per-document item, (log-likelihood, words or bytes): what the
    corpus's metric weighs (no value of its own to average, so no comparison differences it)."""
    records = []
    for index, (instance, answer) in enumerate(zip(instances, answers, strict=True)):
        ll = answer["loglikelihood"]
        weights = (instance.word_count, instance.byte_count, instance.byte_count)
        records.append(
            {
                "doc": index,
                "request": {"text": instance.text},
                "answer": dict(answer),
                "metrics": {name: [ll, w] for name, w in zip(METRICS, weights, strict=True)},
            }
        )
    return records


class PerplexityColumns(Columns):
    schema = pa.schema(
        [
            ("text", pa.string()),
            ("word_count", pa.int64()),
            ("byte_count", pa.int64()),
            ("stride", pa.int64()),  # null: max_length
        ]
    )

    def row(self, instance: Any) -> dict[str, Any]:
        return {name: getattr(instance, name) for name in self.schema.names}

    def instance(self, row: Mapping[str, Any], where: str) -> Any:
        return PerplexityInstance(**{name: row[name] for name in self.schema.names})


class Perplexity(TaskKind):
    name = "perplexity"
    columns = PerplexityColumns()

    def training_instances(self, instances, where):
        raise TaskDataError(f"{where}: a corpus scored by its perplexity, not one to train on")

    def validation_metrics(self, task):
        """None: a corpus is no training run's data, so none of its splits validates one (asked
        first when a training step's data is known)."""
        raise_trained_on(task)

    def check_settings(
        self, task: Any, length: Callable[[], int | None], extra_metrics: Sequence[str] | None
    ) -> None:
        if extra_metrics:
            raise ConfigurationError(
                f"evaluate.extra_metrics: task '{task.name}' is scored by its perplexity; "
                "extra_metrics are forms of multiple-choice scores"
            )
        positions = length()
        if positions is not None:
            check_stride(task.stride, positions, f"task '{task.name}'", "evaluate.max_length")

    def check_in_loop(self, task, max_length):
        where = f"train.evaluate_tasks: task '{task.name}'"
        check_stride(task.stride, max_length, where, "collate_fn.max_length")

    def check_requests(self, what, requests, planned):
        """The stride within `max_length`, and every document of tokens (a text that the
        tokenizer makes nothing of has no log-likelihood to score)."""
        tokenizer, max_length, field = planned()
        if requests:
            check_stride(requests[0].stride, max_length, what, field)
        encoder = SequenceEncoder(tokenizer, max(max_length, 2), field)
        keys = [encoder.key(document.text) for document in requests]
        found = tokenize_keys(tokenizer, keys)
        empty = next((i for i, key in enumerate(keys) if not found[key]), None)
        if empty is not None:
            raise TaskDataError(
                f"{what}: document {empty} has no tokens ({requests[empty].text[:40]!r}); a "
                "document is a text of at least one token"
            )

    def answers_cut(self, instances, tokenizer, max_length):
        return 0  # no choices: a document is scored whole, window by window

    def widest(self, instances):
        return 1  # a document's windows run a batch's rows at a time

    def collate(self, collator, instances, weights, known=None):
        return document_windows(collator.encoder, instances, weights, known)

    def token_texts(self, collator, instance):
        return [collator.encoder.key(instance.text)]

    def update(self, scorer: Scorer, batch: Any) -> dict[str, float]:
        answers = document_answers(batch, lockstep_scores(scorer, batch))
        sums = dict.fromkeys(("loglikelihood", "words", "bytes", "count"), 0.0)
        for document, answer, weight in zip(batch.documents, answers, batch.weights, strict=True):
            if weight > 0:
                sums["loglikelihood"] += answer["loglikelihood"] * weight
                sums["words"] += document.word_count * weight
                sums["bytes"] += document.byte_count * weight
                sums["count"] += weight
        return sums

    def compute(
        self, sums: Mapping[str, float], instances: Sequence[Any], validating: bool = False
    ) -> dict[str, float]:
        metrics: dict[str, Any] = corpus_metrics(
            float(sums["loglikelihood"]), float(sums["words"]), float(sums["bytes"])
        )
        return {**metrics, **without_stderrs(), "count": int(float(sums["count"]))}

    def answers(self, model, requests, options):
        encoder = SequenceEncoder(model.tokenizer, options["max_length"])
        batch = document_windows(encoder, list(requests), [1.0] * len(requests))
        scores: dict[tuple[int, int], float] = {}
        device = options["device"]
        with evaluating(model), options["precision"].autocast(torch.device(device).type):
            for chosen, values in sequence_batch_scores(
                model, batch.sequences, options["batch_size"], device, options["progress"]
            ):
                for s, value in zip(chosen, values.tolist(), strict=True):
                    scores[(s.instance, s.choice)] = value
        in_order = [scores[(s.instance, s.choice)] for s in batch.sequences]
        return document_answers(batch, in_order)

    def batch_answers(self, scorer, batch, items):
        return document_answers(batch, lockstep_scores(scorer, batch))

    def is_answer(self, request, answer):
        return (
            isinstance(answer, dict)
            and isinstance(answer.get("loglikelihood"), float)
            and math.isfinite(answer["loglikelihood"])
            and all(type(answer.get(key)) is int for key in ("tokens", "windows"))
        )

    def records(self, instances, answers, context):
        return perplexity_records(instances, answers)

    def result(self, instances: list, answers: list, context: ResultContext) -> dict[str, Any]:
        """The corpus's metrics from the documents' log-likelihoods, words and bytes, summed
        in document order (as lm-eval sums its items)."""
        loglikelihood = sum(answer["loglikelihood"] for answer in answers)
        words = sum(instance.word_count for instance in instances)
        utf8_bytes = sum(instance.byte_count for instance in instances)
        metrics = corpus_metrics(loglikelihood, words, utf8_bytes)
        records = self.records(instances, answers, context)
        return {
            **metrics,
            **without_stderrs(),
            "n": len(instances),
            "kind": self.name,
            RECORDS: records,
        }

    def summary(self, result):
        return (*METRICS, "n")

    def shown(self, result, metric):
        return "word_perplexity"

    def lower_is_better(self, key: str) -> bool:
        return key in METRICS or key == "loss"

    def decode(self, record: Mapping[str, Any], where: str) -> Any:
        return PerplexityInstance(**tupled(record))

    def owns(self, result):
        return "word_perplexity" in result


def raise_trained_on(task: Any) -> NoReturn:
    """A perplexity corpus given as a training step's data: one line."""
    named = f"task '{task.name}'" if hasattr(task, "name") else "the data"
    raise ConfigurationError(
        f"train.dataset_dict: {named} is a corpus scored by its perplexity (in "
        "train.evaluate_tasks, or by catwalk::evaluate), not one to train on"
    )


def check_stride(stride: int | None, max_length: int, where: str, field: str) -> None:
    """A window predicts at most `max_length` tokens: a longer `stride` is one line."""
    if stride is not None and stride > max_length:
        raise ConfigurationError(
            f"{where}.stride: {stride} tokens, more than {field} {max_length} (a window "
            f"predicts at most max_length tokens); give stride <= {max_length} or leave it out"
        )


PERPLEXITY = register(Perplexity())
