"""Multiple choice (lm-evaluation-harness's tasks, the synthetic task, PIQA): each choice's
summed log-probability; `acc` and `acc_norm` (per character of the choice), per subtask and
group for a grouped task, and on request the per-byte and per-token forms."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from ..metrics.records import RECORDS, grouped_stderrs, mean_of, stderrs
from ..metrics.sums import MeanSums
from ..scoring.choices import score_choices
from ..scoring.logprobs import LOG_2_OF_E, choice_metrics
from ..scoring.packing import pack_rows, packed_rows
from ..scoring.sequences import SequenceEncoder, pad_sequences
from ..scoring.tokenization import Known, load_tokenizer
from ..tasks.base import MultipleChoiceInstance, joined_choice_text
from .base import ResultContext, Scorer, TaskKind, register, tupled
from .columns import MultipleChoiceColumns

# Each metric and the model's forward output of its per-instance values (1.0: the pick is right).
RIGHT = {"acc": "right", "acc_norm": "right_norm"}
SUBTASKS = "subtasks"  # a grouped task's batch: each instance's subtask, for the sums per part


def choice_tensors(
    instances: Sequence[MultipleChoiceInstance], scores: Sequence[Sequence[float]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores [instances, choices] (float64, -inf where an instance has fewer), the characters
    `acc_norm` divides each by, and the labels."""
    width = max(len(instance.choices) for instance in instances)
    padded = torch.full((len(instances), width), float("-inf"), dtype=torch.float64)
    chars = torch.ones((len(instances), width), dtype=torch.float64)
    for i, (instance, row) in enumerate(zip(instances, scores, strict=True)):
        padded[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
        chars[i, : len(row)] = torch.tensor(instance.norm_chars(), dtype=torch.float64)
    return padded, chars, torch.tensor([instance.label for instance in instances])


def metrics_from_scores(
    instances: Sequence[MultipleChoiceInstance], scores: Sequence[Sequence[float]]
) -> dict[str, float | int]:
    """`acc`, `acc_norm` (score per character of the choice text, lm-evaluation-harness's
    definitions; ties go to the first choice, as its `np.argmax`) and `n` over all instances."""
    padded, chars, labels = choice_tensors(instances, scores)
    counts = choice_metrics(padded, labels, chars, torch.ones(len(instances), dtype=torch.float64))
    n = int(counts["count"])
    return {
        "acc": float(counts["correct"]) / n,
        "acc_norm": float(counts["correct_norm"]) / n,
        "n": n,
    }


def choice_records(
    instances: Sequence[MultipleChoiceInstance], scores: Sequence[Sequence[float]]
) -> list[dict[str, Any]]:
    """Each instance's record (:mod:`~catwalk_steps.metrics.records`): its context and
    choices, their summed log-likelihoods, the pick by score and by score per character (as
    :func:`choice_metrics` picks), the gold, and `acc`, `acc_norm` of the one instance."""
    padded, chars, labels = choice_tensors(instances, scores)
    picks = padded.argmax(dim=1).tolist()
    picks_norm = (padded / chars.clamp(min=1)).argmax(dim=1).tolist()
    records = []
    for i, (instance, row) in enumerate(zip(instances, scores, strict=True)):
        context = instance.context if isinstance(instance.context, str) else list(instance.context)
        record: dict[str, Any] = {
            "doc": i,
            "request": {"context": context, "choices": list(instance.choices)},
            "answer": {"logprobs": list(row), "pick": picks[i], "pick_norm": picks_norm[i]},
            "gold": instance.label,
            "metrics": {
                "acc": float(picks[i] == instance.label),
                "acc_norm": float(picks_norm[i] == instance.label),
            },
        }
        if instance.subtask is not None:
            record["subtask"] = instance.subtask
        records.append(record)
    return records


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
    the means of :func:`extra_values`."""
    totals = dict.fromkeys(wanted, 0.0)
    for instance, row, tokens in zip(instances, scores, token_counts, strict=True):
        for name, value in extra_values(instance, row, tokens, wanted).items():
            totals[name] += value
    return {name: total / len(instances) for name, total in totals.items()}


def extra_values(
    instance: MultipleChoiceInstance, row: Sequence[float], tokens: Sequence[int], wanted: Any
) -> dict[str, float]:
    """One instance's per-byte and per-token forms asked for: `acc_bytes` (lm-evaluation-
    harness's: the highest score per UTF-8 byte of the choice text, without the space that
    joins it), `acc_per_token` (per token of the continuation), and `bits_per_byte` (the right
    continuation's `-score / bytes * log2(e)`, its joining space counted, as OLMES counts it)."""
    texts = [joined_choice_text(choice) for choice in instance.choices]
    per_byte = [s / max(len(t.encode("utf-8")), 1) for s, t in zip(row, texts, strict=True)]
    per_token = [s / max(n, 1) for s, n in zip(row, tokens, strict=True)]
    gold = instance.choices[instance.label]
    values = {
        "acc_bytes": float(max(range(len(row)), key=per_byte.__getitem__) == instance.label),
        "acc_per_token": float(max(range(len(row)), key=per_token.__getitem__) == instance.label),
        "bits_per_byte": -row[instance.label] / max(len(gold.encode("utf-8")), 1) * LOG_2_OF_E,
    }
    return {name: values[name] for name in wanted}


def choice_batch(
    collator: Any,
    instances: list,
    weights: list[float],
    alone: bool = False,
    known: Known | None = None,
) -> dict[str, Any]:
    """Instances with all their choices: one sequence per choice (padded), which instance and
    choice each is, the characters `acc_norm` divides by, the labels and weights, and the same
    sequences as packed rows that run each context once (`alone`: encoded as ai2-olmo-eval
    encodes them; `known`: their texts' tokens as stored)."""
    encoder = collator.encoder
    sequences = encoder.sequences(instances, alone, known)
    batch: dict[str, Any] = dict(pad_sequences(sequences, encoder.tokenizer.pad_token_id))
    batch.update(
        instance_index=torch.tensor([s.instance for s in sequences]),
        choice_index=torch.tensor([s.choice for s in sequences]),
        choice_chars=torch.tensor([s.choice_chars for s in sequences]),
        labels=torch.tensor([instance.label for instance in instances]),
        weights=torch.tensor(weights),
        num_choices=max(len(instance.choices) for instance in instances),
        packed=pack_rows(packed_rows(sequences), encoder.tokenizer.pad_token_id),
    )
    return batch


def score_rows(scorer: Scorer, batch: Any, items: list) -> list[list[float]]:
    """Each item's choices' scores from one forward (the model's `scores` output)."""
    rows = scorer.forward(batch)["scores"].float().cpu().tolist()
    return [row[: len(item.choices)] for row, item in zip(rows, items, strict=False)]


def choice_answers(
    model: Any, requests: list, options: Mapping[str, Any], alone: bool = False
) -> list:
    """Every request's choices scored on one device (:func:`~..scoring.choices.score_choices`;
    `alone`: encoded as ai2-olmo-eval encodes them)."""
    return score_choices(model, requests, **options, alone=alone)


def continuation_tokens(tokenizer: str, length: int, instances: list) -> list[list[int]]:
    """Each choice's continuation tokens, as the scores counted them."""
    encoder = SequenceEncoder(load_tokenizer(tokenizer, "evaluate.model.tokenizer"), length)
    counts: list[list[int]] = [[] for _ in instances]
    for sequence in encoder.sequences(instances):
        counts[sequence.instance].append(sequence.continuation_length)
    return counts


class MultipleChoice(TaskKind):
    name = "multiple_choice"
    columns = MultipleChoiceColumns()

    def check_settings(
        self, task: Any, length: Callable[[], int | None], extra_metrics: Sequence[str] | None
    ) -> None:
        pass  # every extra metric is a form of its scores

    def collate(self, collator, instances, weights, known=None):
        batch = choice_batch(collator, instances, weights, known=known)
        if any(instance.subtask is not None for instance in instances):
            batch[SUBTASKS] = [instance.subtask for instance in instances]
        return batch

    def token_texts(self, collator, instance):
        return list(dict.fromkeys(collator.encoder.instance_texts(instance, alone=False)))

    def cuts(self, collator, instances, known):
        encoder = collator.encoder
        return 0, sum(encoder.answer_cut(instance, False, known) for instance in instances)

    def update(self, scorer: Scorer, batch: Any) -> dict[str, float]:
        outputs = scorer.forward(batch)
        missing = {*RIGHT.values(), "loss"} - outputs.keys()
        if missing:
            raise ConfigurationError(
                f"catwalk::train: the model's forward returned no {sorted(missing)}; "
                "use a catwalk::rank_classifier model"
            )
        values = {name: outputs[key].float().cpu() for name, key in RIGHT.items()}
        sums = MeanSums().add(values, batch["weights"], batch.get(SUBTASKS)).sums
        sums["loss_sum"] = float(outputs["loss"]) * sums["count"]  # the batch's mean, weighed
        return sums

    def compute(
        self, sums: Mapping[str, float], instances: Sequence[Any], validating: bool = False
    ) -> dict[str, float]:
        """Exact over the whole split (not a mean of batch means): `acc`, `acc_norm` with their
        standard errors (a grouped task's pooled from its subtasks', as the evaluate step's),
        `count`; validating, the mean `loss` per instance too."""
        totals = MeanSums(sums)
        metrics: dict[str, Any] = {**totals.metrics(RIGHT), "count": int(totals.count)}
        if validating:
            metrics["loss"] = totals.sums["loss_sum"] / max(totals.count, 1.0)
        return metrics

    def answers(self, model, requests, options):
        return choice_answers(model, requests, options)

    def batch_answers(self, scorer, batch, items):
        return score_rows(scorer, batch, items)

    def records(self, instances, answers, context):
        records = choice_records(instances, answers)
        wanted = [name for name in context.extra_metrics or () if name in EXTRA_METRICS]
        if wanted:
            assert context.tokenizer is not None
            tokens = continuation_tokens(context.tokenizer, context.max_length, instances)
            for record, instance, row, counts in zip(
                records, instances, answers, tokens, strict=True
            ):
                record["metrics"].update(extra_values(instance, row, counts, wanted))
        return records

    def result(self, instances: list, answers: list, context: ResultContext) -> dict[str, Any]:
        groups = getattr(getattr(context.task, "spec", None), "subtask_groups", None)
        metrics = task_metrics(instances, answers, groups)
        records = self.records(instances, answers, context)
        wanted = [name for name in context.extra_metrics or () if name in EXTRA_METRICS]
        if wanted:
            metrics.update({name: mean_of(records, name) for name in wanted})
        if "subtasks" in metrics:
            grouped_stderrs(metrics, records, groups)
        else:
            metrics.update(stderrs(records))
        return {**metrics, "kind": self.name, RECORDS: records}

    def summary(self, result):
        return ("acc", "acc_norm", "n")

    def shown(self, result, metric):
        return metric or "acc"

    def decode(self, record: Mapping[str, Any], where: str) -> Any:
        return MultipleChoiceInstance(**tupled(record))


MULTIPLE_CHOICE = register(MultipleChoice())
