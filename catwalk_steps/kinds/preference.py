"""Preference pairs (a prompt, the answer chosen, the one rejected): trained on by DPO and its
variants (`objective: 'dpo'`), validated and evaluated by TRL's metrics: the reward accuracy
(`rewards/accuracies`: the chosen answer rewarded more), margins, each answer's reward and
log-probability (`rewards/*`, `logps/*`), each with its standard error as a mean's
(:mod:`~catwalk_steps.metrics.stderr`).

A reward is beta times the model's log-probability of an answer over the reference's, so a pair
scores against a reference: the one its `catwalk::reference_logprobs` step computed (carried by
the instance), or, for a model with an adapter, its base with the adapter off. In the loop
every batch is one forward through the engine's root wrapper on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..metrics.records import RECORDS, stderrs
from ..metrics.sums import MeanSums
from ..objectives import Examples
from ..scoring.packing import CONTEXT_SEGMENT
from ..scoring.preference import ANSWER_TOKENS
from ..scoring.preference_objective import (
    ACCURACIES,
    LOGPS_CHOSEN,
    LOGPS_REJECTED,
    MARGINS,
    PAIR_METRICS,
    REWARDS_CHOSEN,
    REWARDS_REJECTED,
)
from ..tasks.preference import PreferenceInstance
from .base import Scorer, TaskKind, register
from .columns import PreferenceColumns
from .preference_batches import (
    batch_answers,
    cut_pairs,
    pair_texts,
    preference_answers,
    preference_batch,
)

LOSS = "loss"


def pair_values(answer: Mapping[str, Any]) -> dict[str, float]:
    """A pair's metrics from its answer (TRL's names): log-probabilities always, rewards where
    the model had a reference."""
    chosen, rejected = answer["logps"]
    values = {LOGPS_CHOSEN: chosen, LOGPS_REJECTED: rejected}
    if answer.get("rewards") is not None:
        good, bad = answer["rewards"]
        values.update(
            {
                REWARDS_CHOSEN: good,
                REWARDS_REJECTED: bad,
                ACCURACIES: float(good > bad),
                MARGINS: good - bad,
            }
        )
    return values


class Preference(TaskKind):
    name = "preference"
    columns = PreferenceColumns()
    examples = Examples.PAIRS

    def check_in_loop(self, task, max_length):
        raise ConfigurationError(
            f"train.evaluate_tasks: task '{task.name}' holds preference pairs, whose rewards are "
            "scored against a reference: validate on them as the training step's data (through "
            "catwalk::reference_logprobs), or evaluate them after training"
        )

    def validation_metrics(self, task):
        return (*PAIR_METRICS, LOSS)

    def lower_is_better(self, key):
        return key == LOSS

    def answers_cut(self, instances, tokenizer, max_length):
        return cut_pairs(tokenizer, max_length, instances)[1]  # longer than the window

    def prompts_cut(self, instances, tokenizer, max_length):
        return cut_pairs(tokenizer, max_length, instances)[0]  # TRL's keep_end

    def widest(self, instances):
        return 2  # two answers per pair (in one packed row)

    def collate(self, collator, instances, weights, known=None):
        encoder = collator.encoder
        return preference_batch(encoder.tokenizer, encoder.max_length, instances, weights, known)

    def token_texts(self, collator, instance):
        return pair_texts(collator.encoder.tokenizer, instance)

    def cuts(self, collator, instances, known):
        encoder = collator.encoder
        return cut_pairs(encoder.tokenizer, encoder.max_length, instances, known)

    def batch_tokens(self, batch):
        """Each pair's prompt once and both its answers, as a packed row holds them (the same
        count whether the model runs packed rows or TRL's two rows per pair)."""
        pairs = batch["preference"]
        prompts = int((pairs["packed_segments"] == CONTEXT_SEGMENT).sum())
        return prompts + int(pairs[ANSWER_TOKENS].sum())

    def update(self, scorer: Scorer, batch: Any) -> dict[str, float]:
        outputs = scorer.forward(batch)
        weights = batch["weights"].float().cpu()
        values = {  # (every rank the same keys: the sums are added over ranks)
            name: outputs[name].detach().float().cpu() if name in outputs else weights * 0
            for name in PAIR_METRICS
        }
        sums = MeanSums().add(values, weights).sums
        loss = outputs.get(LOSS)
        sums[LOSS] = 0.0 if loss is None else float(loss.detach().float().cpu()) * sums["count"]
        return sums

    def compute(
        self, sums: Mapping[str, float], instances: Sequence[Any], validating: bool = False
    ) -> dict[str, float]:
        totals = MeanSums(sums)
        metrics: dict[str, Any] = totals.metrics(PAIR_METRICS)
        if validating:
            metrics[LOSS] = totals.sums[LOSS] / max(totals.count, 1.0)
        return {**metrics, "count": int(totals.count)}

    def answers(self, model, requests, options):
        return preference_answers(model, requests, options)

    def batch_answers(self, scorer, batch, items):
        return batch_answers(scorer.forward(batch), len(items))[: len(items)]

    def is_answer(self, request, answer):
        logps = answer.get("logps") if isinstance(answer, dict) else None
        return isinstance(logps, list) and len(logps) == 2

    def with_references(self, instances, answers):
        return [
            replace(instance, reference=(float(answer["logps"][0]), float(answer["logps"][1])))
            for instance, answer in zip(instances, answers, strict=True)
        ]

    def records(self, instances, answers, context):
        return [
            {
                "doc": index,
                "request": {"prompt": i.prompt, "chosen": i.chosen, "rejected": i.rejected},
                "answer": answer,
                "gold": "chosen",
                "metrics": pair_values(answer),
            }
            for index, (i, answer) in enumerate(zip(instances, answers, strict=True))
        ]

    def result(self, instances, answers, context):
        records = self.records(instances, answers, context)
        names = list(records[0]["metrics"]) if records else []
        metrics: dict[str, Any] = {
            name: sum(r["metrics"][name] for r in records) / len(records) for name in names
        }
        primary = ACCURACIES if ACCURACIES in metrics else LOGPS_CHOSEN
        metrics.update(primary_metric=primary, n=len(records), kind=self.name)
        return {**metrics, **stderrs(records), RECORDS: records}

    def shown(self, result, metric):
        if isinstance(result.get("primary_metric"), str):
            return result["primary_metric"]
        return ACCURACIES if ACCURACIES in result else LOGPS_CHOSEN

    def encode(self, instance):
        record = {
            "prompt": instance.prompt,
            "chosen": instance.chosen,
            "rejected": instance.rejected,
            "kind": self.name,
        }
        if instance.reference is not None:
            record["reference"] = list(instance.reference)
        return record

    def decode(self, record, where):
        reference = record.get("reference")
        return PreferenceInstance(
            prompt=record["prompt"],
            chosen=record["chosen"],
            rejected=record["rejected"],
            reference=None if reference is None else (float(reference[0]), float(reference[1])),
        )

    def owns(self, result):
        return ACCURACIES in result or LOGPS_CHOSEN in result


PREFERENCE = register(Preference())
