"""Scoring a whole split fast: each question's context run once (packed rows), batched by length.

Sorting by length before batching keeps padding (wasted compute) small; the longest batch comes
first so an out-of-memory error shows at once, not at the end. A model that cannot take packed
rows runs every (context, choice) sequence in full, batched the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tango.common import Tqdm

from ..tasks import MultipleChoiceInstance
from ..tasks.base import joined_choice_text
from .logprobs import choice_metrics
from .olmo_metrics import LOG_2_OF_E
from .packing import pack_rows, row_batches
from .precision import Precision
from .rank_classifier import RankClassifier
from .sequences import ChoiceSequence, SequenceEncoder, pad_sequences

FP32 = Precision("fp32")


@contextlib.contextmanager
def evaluating(model: torch.nn.Module):
    """Eval mode and no autograd for the block, restoring the previous mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def score_choices(
    model: RankClassifier,
    instances: Sequence[MultipleChoiceInstance],
    batch_size: int = 32,
    max_length: int | None = None,
    device: torch.device | str = "cpu",
    precision: Precision = FP32,
    progress: bool = True,
    share_contexts: bool = True,
) -> list[list[float]]:
    """Each instance's per-choice scores (summed continuation log-probs), in input order.

    The model must already be on `device`; `precision` sets autocast (scores stay float32).
    `max_length` is the model's input length (default: its own, :func:`model_max_length`).
    `share_contexts=False` runs every (context, choice) sequence in full, as models that cannot
    take packed rows are run (for comparisons: the scores are the same).
    """
    encoder = SequenceEncoder(model.tokenizer, max_length or model_max_length(model))
    sequences = encoder.sequences(instances)
    scores = [[0.0] * len(instance.choices) for instance in instances]
    autocast = precision.autocast(torch.device(device).type)
    shared = share_contexts and model.shares_contexts()
    run = packed_batch_scores if shared else sequence_batch_scores
    with evaluating(model), autocast:
        for chosen, batch_scores in run(model, sequences, batch_size, device, progress):
            for s, value in zip(chosen, batch_scores.tolist(), strict=True):
                scores[s.instance][s.choice] = value
    return scores


def packed_batch_scores(model, sequences: Sequence[ChoiceSequence], batch_size, device, progress):
    """(sequences, their scores) per batch of packed rows, the longest rows first."""
    pad_id = model.tokenizer.pad_token_id
    batches = row_batches(sequences, batch_size)
    for chosen, rows in Tqdm.tqdm(batches, desc="Scoring", disable=not progress):
        packed = {name: t.to(device) for name, t in pack_rows(rows, pad_id).items()}
        yield [sequences[k] for k in chosen], model.score_packed(packed, len(chosen))


def sequence_batches(sequences: Sequence[ChoiceSequence], batch_size: int) -> list[list[int]]:
    """The sequences' indices in batches of `batch_size`, the longest sequences first."""
    order = sorted(range(len(sequences)), key=lambda k: -len(sequences[k].token_ids))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def sequence_batch_scores(model, sequences: Sequence[ChoiceSequence], batch_size, device, progress):
    """(sequences, their scores) per batch of whole sequences, the longest first."""
    batches = sequence_batches(sequences, batch_size)
    for batch in Tqdm.tqdm(batches, desc="Scoring", disable=not progress):
        chosen = [sequences[k] for k in batch]
        tensors = pad_sequences(chosen, model.tokenizer.pad_token_id)
        yield (
            chosen,
            model.score_sequences(
                tensors["input_ids"].to(device),
                tensors["attention_mask"].to(device),
                tensors["continuation_mask"].to(device),
                tensors["logits_from"],
            ),
        )


def metrics_from_scores(
    instances: Sequence[MultipleChoiceInstance], scores: Sequence[Sequence[float]]
) -> dict[str, float | int]:
    """`acc`, `acc_norm` (score per character of the choice text, lm-evaluation-harness's
    definitions; ties go to the first choice, as its `np.argmax`) and `n` over all instances."""
    width = max(len(instance.choices) for instance in instances)
    padded = torch.full((len(instances), width), float("-inf"), dtype=torch.float64)
    chars = torch.ones((len(instances), width), dtype=torch.float64)
    for i, (instance, row) in enumerate(zip(instances, scores, strict=True)):
        padded[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
        chars[i, : len(row)] = torch.tensor(instance.norm_chars(), dtype=torch.float64)
    labels = torch.tensor([instance.label for instance in instances])
    counts = choice_metrics(padded, labels, chars, torch.ones(len(instances), dtype=torch.float64))
    n = int(counts["count"])
    return {
        "acc": float(counts["correct"]) / n,
        "acc_norm": float(counts["correct_norm"]) / n,
        "n": n,
    }


def task_metrics(
    instances: Sequence[MultipleChoiceInstance],
    scores: Sequence[Sequence[float]],
    subtask_groups: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """:func:`metrics_from_scores` over all instances, and for a grouped task (MMLU) per subtask
    and per group of subtasks. Every average is over instances (lm-evaluation-harness's
    `weight_by_size`), so the whole is the instance-weighted mean of its parts."""
    metrics: dict[str, Any] = dict(metrics_from_scores(instances, scores))
    parts: dict[str, list[int]] = {}
    for index, instance in enumerate(instances):
        if instance.subtask is not None:
            parts.setdefault(instance.subtask, []).append(index)
    if not parts:
        return metrics

    def over(indices: list[int]) -> dict[str, float | int]:
        return metrics_from_scores([instances[i] for i in indices], [scores[i] for i in indices])

    metrics["subtasks"] = {name: over(indices) for name, indices in parts.items()}
    groups: dict[str, list[int]] = {}
    for name, indices in parts.items():
        group = (subtask_groups or {}).get(name)
        if group is not None:
            groups.setdefault(group, []).extend(indices)
    if groups:
        metrics["groups"] = {name: over(indices) for name, indices in sorted(groups.items())}
    return metrics


EXTRA_METRICS = ("acc_bytes", "acc_per_token", "bits_per_byte")


def extra_metrics_of(
    instances: Sequence[MultipleChoiceInstance],
    scores: Sequence[Sequence[float]],
    token_counts: Sequence[Sequence[int]],
    wanted: Sequence[str],
) -> dict[str, float]:
    """The per-byte and per-token forms asked for (:data:`EXTRA_METRICS`), over all instances:
    `acc_bytes` (lm-evaluation-harness's: the highest score per UTF-8 byte of the choice text,
    without the space that joins it), `acc_per_token` (per token of the continuation), and
    `bits_per_byte` (the right continuation's `-score / bytes * log2(e)`, its joining space
    counted, as OLMES counts it)."""
    right_bytes = right_tokens = bits = 0.0
    for instance, row, tokens in zip(instances, scores, token_counts, strict=True):
        texts = [joined_choice_text(choice) for choice in instance.choices]
        per_byte = [s / max(len(t.encode("utf-8")), 1) for s, t in zip(row, texts, strict=True)]
        per_token = [s / max(n, 1) for s, n in zip(row, tokens, strict=True)]
        right_bytes += max(range(len(row)), key=per_byte.__getitem__) == instance.label
        right_tokens += max(range(len(row)), key=per_token.__getitem__) == instance.label
        gold = instance.choices[instance.label]
        bits += -row[instance.label] / max(len(gold.encode("utf-8")), 1) * LOG_2_OF_E
    n = len(instances)
    values = {"acc_bytes": right_bytes / n, "acc_per_token": right_tokens / n}
    values["bits_per_byte"] = bits / n
    return {name: values[name] for name in wanted}


def model_max_length(model: RankClassifier, default: int = 2048) -> int:
    """The model's input length (:func:`max_length_of` its config and tokenizer)."""
    return max_length_of(getattr(model.lm, "config", None), model.tokenizer, default)


def max_length_of(config: Any, tokenizer: Any, default: int = 2048) -> int:
    """A model's input length, found as lm-evaluation-harness finds it: the config's
    `n_positions`, `max_position_embeddings` or `n_ctx`, else the tokenizer's
    `model_max_length` (unless unset), else `default`."""
    positions = max_positions(config)
    if positions is not None:
        return positions
    from_tokenizer = getattr(tokenizer, "model_max_length", None)
    if isinstance(from_tokenizer, int) and from_tokenizer < 10**12:
        return from_tokenizer
    return default


def max_positions(config: Any) -> int | None:
    """The positions a model's config gives it, or None when it names none."""
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None
