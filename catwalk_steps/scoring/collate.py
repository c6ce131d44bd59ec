"""Batches for the rank classifier: instances with all their choices, as the collate function
of a data loader (training, validation, the in-loop suite, sharded evaluation). The choices are
tokenized by :mod:`.sequences` and also laid out as packed rows (:mod:`.packing`); every tensor
is built on the CPU, and the engine moves the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tango.integrations.torch import DataCollator

from ..tasks import GenerationInstance, MultipleChoiceInstance, OlmoEvalInstance
from .generation import GenerationEncoder
from .olmo_metrics import CODES, lengths_tensor
from .packing import pack_rows, packed_rows
from .sequences import SequenceEncoder, pad_sequences
from .tokenization import load_tokenizer


@dataclass(frozen=True)
class Padding:
    """A stand-in that evens out ranks' shares; it is run like an instance but weighs 0."""

    instance: MultipleChoiceInstance


@dataclass(frozen=True)
class GenerationBatch:
    """Generation requests as a batch: their prompts' tokens and which of them count (not
    :class:`Padding`). Decoding runs step by step (:mod:`.generation`), not as one forward."""

    instances: list[GenerationInstance]
    prompts: list[list[int]]
    live: list[bool]
    encoder: GenerationEncoder


@DataCollator.register("catwalk::multiple_choice")
class MultipleChoiceCollator(DataCollator):
    """Batches instances with all their choices for the rank classifier
    (:class:`~catwalk_steps.scoring.rank_classifier.RankClassifier`).

    :param tokenizer: the model's tokenizer: hub name, path, or "catwalk::byte_level".
    :param max_length: the model's input length in tokens (lm-evaluation-harness's); longer
        (context + choice) pairs are cut on the left of the context.

    :ivar unconditioned_rows: a batch of ai2-olmo-eval documents scored by `pmi_dc` also
        carries their continuations after the unconditioned prompt (zero-weight instances after
        the documents), so that one forward gives their metrics (`olmo_eval` in the batch:
        :func:`olmo_eval_batch`). Off where the caller scores those instances itself.
    """

    unconditioned_rows = True

    def __init__(self, tokenizer: str, max_length: int = 256):
        self.encoder = SequenceEncoder(
            load_tokenizer(tokenizer, "collate_fn.tokenizer"), max_length, "collate_fn.max_length"
        )
        self.generation_encoder = GenerationEncoder(self.encoder.tokenizer, max_length)

    def __call__(self, items: list) -> dict | GenerationBatch:
        instances = [item.instance if isinstance(item, Padding) else item for item in items]
        weights = [0.0 if isinstance(item, Padding) else 1.0 for item in items]
        if instances and isinstance(instances[0], GenerationInstance):
            return self.generation_batch(instances, [w > 0 for w in weights])
        olmo_eval = None
        if instances and isinstance(instances[0], OlmoEvalInstance):
            olmo_eval, unconditioned = olmo_eval_batch(instances, self.unconditioned_rows)
            instances, weights = instances + unconditioned, weights + [0.0] * len(unconditioned)
        sequences = self.encoder.sequences(instances)
        batch = pad_sequences(sequences, self.encoder.tokenizer.pad_token_id)
        batch.update(
            instance_index=torch.tensor([s.instance for s in sequences]),
            choice_index=torch.tensor([s.choice for s in sequences]),
            choice_chars=torch.tensor([s.choice_chars for s in sequences]),
            labels=torch.tensor([instance.label for instance in instances]),
            weights=torch.tensor(weights),
            num_choices=max(len(instance.choices) for instance in instances),
            # The same sequences as rows that run each context once, for scoring all choices.
            packed=pack_rows(packed_rows(sequences), self.encoder.tokenizer.pad_token_id),
        )
        if olmo_eval is not None:
            batch["olmo_eval"] = olmo_eval
        return batch

    def generation_batch(self, instances: list, live: list[bool]) -> GenerationBatch:
        prompts = self.generation_encoder.prompts(instances)
        return GenerationBatch(instances, prompts, live, self.generation_encoder)


def olmo_eval_batch(
    documents: list[OlmoEvalInstance], unconditioned_rows: bool
) -> tuple[dict[str, torch.Tensor], list[OlmoEvalInstance]]:
    """What the forward needs for olmo_eval's metrics of `documents` (one label's: one metric
    type): each continuation's lengths, the metric type's code, how many rows are documents;
    and the documents' unconditioned instances when the metric is pmi_dc."""
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
