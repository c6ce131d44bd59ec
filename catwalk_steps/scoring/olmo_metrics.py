"""The metrics OLMo tracks during training, as ai2-olmo-eval's `ICLMetric.compute()` defines them,
from one scoring pass (plus one over the unconditioned prompt for `pmi_dc`).

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
The arithmetic per request is olmo_eval's, in float32; sums are float64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

LOG_2_OF_E = 1.44269504089
CODES = {"acc": 0, "len_norm": 1, "pmi_dc": 2, "f1": 3, "ce_loss": 4, "bpb": 5}
METRICS = tuple(CODES)


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


def document_sums(
    scores: torch.Tensor,
    lengths: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    metric: str,
    unconditioned: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Weighted sums over documents (float64 scalars) that :func:`metric_values` turns into
    olmo_eval's metrics; `count` is the documents' weight."""
    values = request_values(scores, lengths, metric, unconditioned)
    w = weights.double()
    gold = labels[:, None]

    def weighted(per_document: torch.Tensor) -> torch.Tensor:
        # Padding (weight 0) counts for nothing, even where its value is infinite (0 x inf).
        return torch.where(w > 0, per_document.double() * w, 0.0).sum()

    def at_gold(tensor: torch.Tensor) -> torch.Tensor:
        return weighted(tensor.gather(1, gold)[:, 0])

    sums = {"count": w.sum()}
    for form in ("v1", "v2"):
        sums[f"ce_{form}"] = at_gold(values[f"ce_{form}"])
        sums[f"bpb_{form}"] = at_gold(values[f"bpb_{form}"])
        ll = values[f"ll_{form}"]
        predicted = ll.argmax(dim=1)
        sums[f"soft_{form}"] = at_gold(ll.softmax(dim=1))
        sums[f"soft_log_{form}"] = at_gold(ll.log_softmax(dim=1))
        sums[f"correct_{form}"] = weighted(predicted == labels)
        positive, said_positive = labels == 0, predicted == 0
        sums[f"tp_{form}"] = weighted(positive & said_positive)
        sums[f"fp_{form}"] = weighted(~positive & said_positive)
        sums[f"fn_{form}"] = weighted(positive & ~said_positive)
    return sums


def f1_score(tp: float, fp: float, fn: float) -> float:
    if tp + fp == 0 or tp + fn == 0:
        return 0.0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def metric_values(sums: Mapping[str, float | torch.Tensor], metric: str) -> dict[str, float]:
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


def primary_metric(metric: str) -> str:
    """The value a report shows for a metric type: its OLMES form (`_v2`)."""
    return f"{metric}_v2"


def olmo_eval_outputs(
    scores: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    batch: Mapping[str, torch.Tensor],
) -> dict[str, object]:
    """A forward's outputs for a batch of olmo_eval documents: the documents' `scores` and
    their metric sums (`olmo_eval`); rows past the documents are their unconditioned rows."""
    documents = int(batch["documents"])
    metric = METRICS[int(batch["metric"])]
    if metric == "pmi_dc" and scores.size(0) < 2 * documents:
        return {}  # no unconditioned rows here: catwalk::evaluate's workers, given them apart
    width = batch["lengths"].size(1)
    scores = scores[:, :width]
    unconditioned = scores[documents:] if metric == "pmi_dc" else None
    sums = document_sums(
        scores[:documents],
        batch["lengths"][:documents],
        labels[:documents],
        weights[:documents],
        metric,
        unconditioned,
    )
    return {"scores": scores[:documents], "olmo_eval": sums}


def score_matrix(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """Per-choice scores as [documents, width] float32, -inf where a document has fewer."""
    matrix = torch.full((len(rows), width), float("-inf"), dtype=torch.float32)
    for i, row in enumerate(rows):
        matrix[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return matrix


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
