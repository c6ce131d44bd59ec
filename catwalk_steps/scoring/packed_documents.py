"""Packed training rows (`collate_fn.packing`): a batch's documents (a prompt and its answer,
as generative training lays one out) put several to a row of `max_length` tokens, and the loss
of the `lm` objective read from those rows.

Rows are filled by best-fit decreasing (what TRL's `packing_strategy='bfd'` does): the longest
document first, each into the row with the least room left that holds it. Within a row each
document has its own segment (1, 2, ...), its positions start at 0 and a token sees only the
earlier tokens of its own document: the causal mask of
:func:`~catwalk_steps.scoring.packing.packed_attention`, whose shared context (segment 0) a
packed document never uses, so the mask is block-diagonal. Every token's log-probability is
then the one it has in its own padded row, and the loss (each document's mean answer-token NLL,
averaged over documents) is the unpacked batch's: packing changes what a step costs, never what
it computes. Only the positions that predict an answer token reach the LM head.

A model with flash attention takes the rows flattened into one, without padding or mask: its
varlen kernel separates the documents by their positions restarting at 0 (Transformers'
`_is_packed_sequence`). Any model that takes packed scoring rows
(:func:`~catwalk_steps.scoring.shared_context.packing_support`) takes these.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from tango.common.exceptions import ConfigurationError

from ..objectives.base import weighted_mean
from ..tasks import TaskDataError
from .packing import PAD_SEGMENT
from .sequences import ChoiceSequence
from .shared_context import attention_mask_for, head_inputs_at, packing_support

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DOCUMENTS = "documents"  # the batch's key for its packed rows
ANSWER_TOKENS = "answer_tokens"  # each document's answer tokens (its loss is their mean)
FLASH = "flash"  # attention implementations whose name says so take varlen rows


def best_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """The indices of `lengths` in rows of at most `capacity`: longest first (ties in their
    order), each into the row with the least room left that holds it, else a new row."""
    rows: list[list[int]] = []
    rooms: list[tuple[int, int]] = []  # (room left, row), sorted
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        length = lengths[index]
        found = bisect.bisect_left(rooms, (length, -1))
        if found == len(rooms):
            rows.append([])
            room, row = capacity, len(rows) - 1
        else:
            room, row = rooms.pop(found)
        rows[row].append(index)
        bisect.insort(rooms, (room - length, row))
    return rows


def packed_answer_batch(
    sequences: Sequence[ChoiceSequence], weights: Sequence[float], pad_id: int, max_length: int
) -> dict[str, Any]:
    """Training sequences (a prompt, then the answer: its last `continuation_length` tokens) as
    packed rows (:func:`pack_documents`), with each document's weight (0: padding)."""
    return {
        DOCUMENTS: pack_documents(sequences, pad_id, max_length),
        "weights": torch.tensor(list(weights)),
    }


def pack_documents(
    sequences: Sequence[ChoiceSequence], pad_id: int, max_length: int
) -> dict[str, torch.Tensor]:
    """Rows of documents (their tokens but the last, which is only a target), with their
    positions and segments (-1: padding), as :func:`~catwalk_steps.scoring.packing.pack_rows`
    names them; the (row, column) predicting each answer token, its target and its document
    (`packed_target_sequence`); each document's number of answer tokens (`answer_tokens`)."""
    rows = best_fit_decreasing([len(s.token_ids) - 1 for s in sequences], max_length)
    width = max(sum(len(sequences[d].token_ids) - 1 for d in row) for row in rows)
    ids = torch.full((len(rows), width), pad_id)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    segments = torch.full((len(rows), width), PAD_SEGMENT)
    predict_rows: list[int] = []
    predict_cols: list[int] = []
    targets: list[int] = []
    documents: list[int] = []
    for r, row in enumerate(rows):
        start = 0
        for k, d in enumerate(row):
            tokens, answer = sequences[d].token_ids, sequences[d].continuation_length
            prompt = len(tokens) - answer
            if prompt == 0:
                raise TaskDataError("a training example with an empty prompt: nothing predicts it")
            fed = len(tokens) - 1
            ids[r, start : start + fed] = torch.tensor(tokens[:-1])
            positions[r, start : start + fed] = torch.arange(fed)
            segments[r, start : start + fed] = k + 1
            predict_rows += [r] * answer
            predict_cols += range(start + prompt - 1, start + fed)
            targets += tokens[prompt:]
            documents += [d] * answer
            start += fed
    return {
        "packed_input_ids": ids,
        "packed_position_ids": positions,
        "packed_segments": segments,
        "packed_predict_rows": torch.tensor(predict_rows),
        "packed_predict_cols": torch.tensor(predict_cols),
        "packed_target_ids": torch.tensor(targets),
        "packed_target_sequence": torch.tensor(documents),
        ANSWER_TOKENS: torch.tensor([s.continuation_length for s in sequences]),
    }


def document_tokens(documents: Mapping[str, torch.Tensor]) -> int:
    """The tokens a packed batch holds (each document's, its unfed last token included): what
    a padded batch's attention mask counts, for tokens/s."""
    fed = int((documents["packed_segments"] != PAD_SEGMENT).sum())
    return fed + int(documents[ANSWER_TOKENS].numel())


def flattened(documents: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The rows as one row without padding (flash attention's varlen form), the positions
    that predict mapped to where their tokens are in it."""
    real = documents["packed_segments"] != PAD_SEGMENT
    where = real.flatten().long().cumsum(0) - 1  # each kept token's place in the one row
    width = real.size(1)
    cols = where[documents["packed_predict_rows"] * width + documents["packed_predict_cols"]]
    return {
        "input_ids": documents["packed_input_ids"][real][None],
        "position_ids": documents["packed_position_ids"][real][None],
        "rows": torch.zeros_like(cols),
        "cols": cols,
    }


def document_log_probs(lm: PreTrainedModel, documents: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """log p(answer token | its document before it) for every answer token, float32: from the
    rows with their block-diagonal mask, or flattened for flash attention."""
    attention = str(getattr(lm.config, "_attn_implementation", ""))
    if FLASH in attention:
        flat = flattened(documents)
        inputs = {"input_ids": flat["input_ids"], "position_ids": flat["position_ids"]}
        rows, cols = flat["rows"], flat["cols"]
    else:
        why = packing_support(lm)
        if why is not None:
            raise ConfigurationError(
                f"collate_fn.packing: {type(lm).__name__} cannot take packed rows ({why}); "
                "leave packing out for this model"
            )
        segments, positions = documents["packed_segments"], documents["packed_position_ids"]
        inputs = {
            "input_ids": documents["packed_input_ids"],
            "position_ids": positions,
            "attention_mask": attention_mask_for(lm, segments, positions),
        }
        rows, cols = documents["packed_predict_rows"], documents["packed_predict_cols"]
    with head_inputs_at(lm.get_output_embeddings(), rows, cols):
        logits = lm(**inputs, use_cache=False).logits[0]
    log_probs = logits.float().log_softmax(dim=-1)
    return log_probs.gather(-1, documents["packed_target_ids"][:, None])[:, 0]


def document_loss(
    lm: PreTrainedModel, documents: Mapping[str, torch.Tensor], weights: torch.Tensor
) -> torch.Tensor:
    """The `lm` objective over packed documents: each one's mean answer-token NLL, averaged
    over documents by weight (:func:`~catwalk_steps.objectives.lm.lm_loss` of the same
    documents unpacked)."""
    token_log_probs = document_log_probs(lm, documents)
    answers = documents[ANSWER_TOKENS]
    sums = torch.zeros(answers.size(0), dtype=torch.float32, device=token_log_probs.device)
    sums = sums.index_add(0, documents["packed_target_sequence"], token_log_probs)
    return weighted_mean(-sums / answers.clamp(min=1), weights.float())
