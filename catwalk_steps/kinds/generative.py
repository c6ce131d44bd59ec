"""Generation (NQ-Open, TriviaQA, GSM8K, a task of one's own): a greedy answer per request,
filtered and scored by the task's own metrics (:mod:`catwalk_steps.tasks.answers`: exact match,
token F1), each `<metric>,<filter>` averaged as lm-evaluation-harness reports it.

Under an engine (in the loop, or a sharded evaluation) every decoding step is one forward
through the engine's root wrapper, on every rank. Ranks hold different prompts and finish at
different steps: a rank whose rows are all done keeps stepping (its tokens are dropped) until
the ranks agree that every one is done (`Scorer.ranks`), and they agree on whether prompts
share a prefix, so all run the same number of forwards: nothing reaches around the wrapper, and
no rank waits alone in a collective.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from ..metrics.records import RECORDS, stderrs
from ..metrics.sums import MeanSums
from ..objectives import Examples
from ..scoring.generated import generate_texts
from ..scoring.generation import GenerationEncoder, eos_ids_of, forward_step, greedy_generate
from ..scoring.packed_documents import DOCUMENTS, document_tokens, packed_answer_batch
from ..scoring.sequences import ChoiceSequence, pad_sequences
from ..scoring.tokenization import Known, TextKey, tokenize_keys
from ..tasks.base import TaskDataError
from ..tasks.generation import GenerationInstance, prompt_room
from .base import Scorer, TaskKind, register, tupled
from .columns import GenerativeColumns, stored_scoring
from .stored import first_without, with_fields


@dataclass(frozen=True)
class GenerationBatch:
    """Generation requests as a batch: their prompts' tokens and which of them count (not
    padding). Decoding runs step by step (:mod:`~catwalk_steps.scoring.generation`), not as one
    forward."""

    instances: list[GenerationInstance]
    prompts: list[list[int]]
    live: list[bool]
    encoder: GenerationEncoder


def lockstep_texts(scorer: Scorer, batch: GenerationBatch) -> list[str]:
    """Each row's answer, each decoding step one `scorer.forward`. Collective where the scorer's
    ranks are: every rank calls it for a batch of the same size."""
    with scorer.decoding_forward() as forward:
        tokens = greedy_generate(
            forward_step(forward),
            batch.encoder,
            batch.prompts,
            batch.instances,
            eos_ids_of(scorer.model.lm, batch.encoder.tokenizer),
            live=batch.live,
            ranks=scorer.ranks,
        )
    return [batch.encoder.text(t, x.until) for t, x in zip(tokens, batch.instances, strict=True)]


def generation_outputs(
    instances: Sequence[GenerationInstance], texts: Sequence[str]
) -> list[dict[str, Any]]:
    """What the model said for each instance, its filtered answers, targets and scores."""
    outputs = []
    for index, (instance, text) in enumerate(zip(instances, texts, strict=True)):
        scored = instance.score(text)
        outputs.append(
            {
                "index": index,
                "context": instance.context,
                "generation": text,
                "filtered": scored["filtered"],
                "targets": list(instance.targets),
                "scores": scored["scores"],
            }
        )
    return outputs


def generation_metrics(
    instances: Sequence[GenerationInstance], outputs: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Each `<metric>,<filter>` averaged over the instances, the one reports show
    (`primary_metric`: the first) and `n`."""
    scoring = instances[0].scoring
    metrics: dict[str, Any] = {
        key: sum(o["scores"][key] for o in outputs) / len(outputs) for key in scoring.names()
    }
    metrics.update(primary_metric=scoring.primary(), n=len(outputs))
    return metrics


def generation_records(outputs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each instance's record (:mod:`~catwalk_steps.metrics.records`) from its output: the
    prompt, the generated text and its filtered answers, the targets, and each
    `<metric>,<filter>` score."""
    return [
        {
            "doc": output["index"],
            "request": {"context": output["context"]},
            "answer": {"generation": output["generation"], "filtered": output["filtered"]},
            "gold": output["targets"],
            "metrics": dict(output["scores"]),
        }
        for output in outputs
    ]


# lm-evaluation-harness's result keys: `<metric>,<filter>`.
KEY_SEPARATOR = ","


def answer_key(instance: GenerationInstance) -> TextKey:
    """How a training example's answer is tokenized: alone, without special tokens."""
    return instance.answer or "", False


def answer_sequences(
    encoder: GenerationEncoder, instances: list, known: Known | None = None
) -> list[ChoiceSequence]:
    """Each training example as one sequence: its prompt as generation encodes it (the
    tokenizer's BOS rule, cut on the left to leave `max_gen_toks` for the answer), then its
    answer's tokens (at most `max_gen_toks`; the end-of-text token when the task has no stop
    sequence), which alone are in the loss. `known`: their texts' tokens as stored."""
    if known is None:
        keys = [key for instance in instances for key in training_texts(encoder, instance)]
        known = tokenize_keys(encoder.tokenizer, keys)
    sequences, prompts = [], encoder.prompts(instances, known)
    for index, (instance, prompt) in enumerate(zip(instances, prompts, strict=True)):
        answer = list(known[answer_key(instance)])
        if not instance.until:
            answer = [*answer, encoder.tokenizer.eos_token_id]
        answer = answer[: instance.max_gen_toks]
        sequences.append(
            ChoiceSequence(tuple(prompt + answer), len(answer), index, 0, len(instance.answer))
        )
    return sequences


def training_texts(encoder: GenerationEncoder, instance: GenerationInstance) -> list[TextKey]:
    return [encoder.prompt_key(instance), answer_key(instance)]


def answer_batch(
    collator: Any, instances: list, weights: list[float], known: Known | None = None
) -> dict[str, Any]:
    """Training examples as one forward of the `lm` objective (:func:`answer_sequences`)."""
    encoder = collator.generation_encoder
    sequences = answer_sequences(encoder, instances, known)
    return training_batch(sequences, weights, encoder.pad_id, encoder.max_length, collator.packing)


def training_batch(
    sequences: list[ChoiceSequence],
    weights: list[float],
    pad_id: int,
    max_length: int,
    packing: bool = False,
) -> dict[str, Any]:
    """Training sequences, one per instance (its right choice), padded; or, `packing`, packed
    into rows of `max_length` (:mod:`~catwalk_steps.scoring.packed_documents`)."""
    if packing:
        return packed_answer_batch(sequences, weights, pad_id, max_length)
    batch: dict[str, Any] = dict(pad_sequences(sequences, pad_id))
    batch.update(
        instance_index=torch.arange(len(sequences)),
        choice_index=torch.zeros(len(sequences), dtype=torch.long),
        choice_chars=torch.tensor([s.choice_chars for s in sequences]),
        labels=torch.zeros(len(sequences), dtype=torch.long),
        weights=torch.tensor(weights),
        num_choices=1,
    )
    return batch


class Generative(TaskKind):
    name = "generative"
    columns = GenerativeColumns()
    examples = Examples.ANSWERS  # one answer per prompt: nothing to rank
    metrics_of_task = True  # its metric list

    def validation_metrics(self, task):
        return tuple(task.scoring.names())

    def answers_cut(self, instances, tokenizer, max_length):
        return 0  # no choices: an answer is generated (a training answer: max_gen_toks)

    def widest(self, instances):
        return 1  # a prompt (or a prompt and its answer) per instance

    def token_texts(self, collator, instance):
        return training_texts(collator.generation_encoder, instance)

    def check_packing(self, task, loader):
        pass  # its training examples (prompt, answer) are what packing packs

    def batch_tokens(self, batch):
        if isinstance(batch, dict) and DOCUMENTS in batch:
            return document_tokens(batch[DOCUMENTS])  # packed rows: each document's tokens
        return super().batch_tokens(batch)

    def training_instances(self, instances, where):
        """Each instance with `training` set; one without an answer is named (a stored split's
        column is scanned: nothing is decoded)."""
        missing = first_without(instances, "answer")
        if missing is not None:
            why = instances[missing].no_answer or "its doc_to_target is empty"
            raise TaskDataError(
                f"{where}: instance {missing + 1} has no target to train on ({why}); a "
                "generative task trains on its first target"
            )
        return with_fields(instances, training=True)

    def check_settings(
        self, task: Any, length: Callable[[], int | None], extra_metrics: Sequence[str] | None
    ) -> None:
        if extra_metrics:
            raise_extra_metrics(task)
        positions = length()
        if positions is not None:
            where, space = f"task '{task.name}'", f"the model's {positions} positions"
            prompt_room(task.max_gen_toks, positions, where, space)

    def check_in_loop(self, task, max_length):
        prompt_room(
            task.max_gen_toks,
            max_length,
            f"train.evaluate_tasks: task '{task.name}'",
            f"collate_fn.max_length {max_length}",
        )

    def collate(self, collator, instances, weights, known=None):
        if instances[0].training:
            return answer_batch(collator, instances, weights, known)
        encoder, live = collator.generation_encoder, [w > 0 for w in weights]
        return GenerationBatch(instances, encoder.prompts(instances), live, encoder)

    def update(self, scorer: Scorer, batch: Any) -> dict[str, float]:
        texts = lockstep_texts(scorer, batch)
        scores = [
            instance.score(text)["scores"]
            for instance, text, live in zip(batch.instances, texts, batch.live, strict=True)
            if live
        ]
        names = batch.instances[0].scoring.names()  # (every rank the same keys, none live too)
        values = {name: [score[name] for score in scores] for name in names}
        return MeanSums().add(values, [1.0] * len(scores)).sums

    def lower_is_better(self, key: str) -> bool:
        return False  # exact match, F1

    def compute(
        self, sums: Mapping[str, float], instances: Sequence[Any], validating: bool = False
    ) -> dict[str, float]:
        totals = MeanSums(sums)
        metrics: dict[str, Any] = totals.metrics(instances[0].scoring.names())
        return {**metrics, "count": int(totals.count)}

    def answers(self, model, requests, options):
        return generate_texts(model, requests, **options)

    def batch_answers(self, scorer, batch, items):
        return lockstep_texts(scorer, batch)

    def is_answer(self, request, answer):
        return isinstance(answer, str)  # the generated text

    def records(self, instances, answers, context):
        return generation_records(generation_outputs(instances, answers))

    def result(self, instances, answers, context):
        outputs = generation_outputs(instances, answers)
        records = generation_records(outputs)
        metrics = {**generation_metrics(instances, outputs), **stderrs(records)}
        return {**metrics, "outputs": outputs, "kind": self.name, RECORDS: records}

    def summary(self, result):
        names = [key for key in result if KEY_SEPARATOR in key]
        return (*names, "n")

    def shown(self, result, metric):
        """A result's `primary_metric`; an in-loop point's first score."""
        if isinstance(result.get("primary_metric"), str):
            return result["primary_metric"]
        return next(key for key in result if KEY_SEPARATOR in key)

    def encode(self, instance):
        return instance.record()  # its scoring as the lists it was read from

    def decode(self, record: Mapping[str, Any], where: str) -> Any:
        return GenerationInstance(
            **tupled(record, "scoring"), scoring=stored_scoring(record["scoring"], where)
        )

    def details(self, result):
        return {k: v for k, v in super().details(result).items() if k != "outputs"}  # apart

    def outputs(self, result):
        return list(result["outputs"]) if isinstance(result.get("outputs"), list) else None

    def owns(self, result):
        return isinstance(result.get("outputs"), list) or any(KEY_SEPARATOR in k for k in result)


def raise_extra_metrics(task: Any) -> None:
    raise ConfigurationError(
        f"evaluate.extra_metrics: task '{task.name}' is generative; extra_metrics are forms of "
        "multiple-choice scores"
    )


GENERATIVE = register(Generative())
