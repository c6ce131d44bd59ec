"""Scoring a whole split fast: each question's context run once (packed rows), batched by length.

Sorting by length before batching keeps padding (wasted compute) small; the longest batch comes
first so an out-of-memory error shows at once, not at the end. A model that cannot take packed
rows runs every (context, choice) sequence in full, batched the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from tango.common import Tqdm

from ..settings import BATCH_SIZE, FP32, Precision
from ..tasks import MultipleChoiceInstance
from .packing import pack_rows, row_batches
from .rank_classifier import RankClassifier
from .sequences import ChoiceSequence, SequenceEncoder, pad_sequences


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
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
    batch_size: int = BATCH_SIZE,
    max_length: int | None = None,
    device: torch.device | str = "cpu",
    precision: Precision = FP32,
    progress: bool = True,
    share_contexts: bool = True,
    alone: bool = False,
) -> list[list[float]]:
    """Each instance's per-choice scores (summed continuation log-probs), in input order.

    The model must already be on `device`; `precision` sets autocast (scores stay float32).
    `max_length` is the model's input length (default: its own, :func:`model_max_length`).
    `share_contexts=False` runs every (context, choice) sequence in full, as models that cannot
    take packed rows are run (for comparisons: the scores are the same). `alone`: the pairs
    encoded as ai2-olmo-eval encodes them (:meth:`SequenceEncoder.sequences`).
    """
    encoder = SequenceEncoder(model.tokenizer, max_length or model_max_length(model))
    sequences = encoder.sequences(instances, alone)
    scores = [[0.0] * len(instance.choices) for instance in instances]
    autocast = precision.autocast(torch.device(device).type)
    shared = share_contexts and model.shares_contexts()
    run = packed_batch_scores if shared else sequence_batch_scores
    with evaluating(model), autocast:
        for chosen, batch_scores in run(model, sequences, batch_size, device, progress):
            for s, value in zip(chosen, batch_scores.tolist(), strict=True):
                scores[s.instance][s.choice] = value
    return scores


def packed_batch_scores(
    model: RankClassifier,
    sequences: Sequence[ChoiceSequence],
    batch_size: int,
    device: torch.device | str,
    progress: bool,
) -> Iterator[tuple[list[ChoiceSequence], torch.Tensor]]:
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


def sequence_batch_scores(
    model: RankClassifier,
    sequences: Sequence[ChoiceSequence],
    batch_size: int,
    device: torch.device | str,
    progress: bool,
) -> Iterator[tuple[list[ChoiceSequence], torch.Tensor]]:
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


def model_max_length(model: Any, default: int = 2048) -> int:
    """A rank classifier's input length (:func:`max_length_of` its config and tokenizer)."""
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
