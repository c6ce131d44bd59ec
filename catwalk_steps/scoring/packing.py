"""Shared-context scoring, the data half: one packed row per question.

A question's context is the same for all its choices, so it is run once: a row holds the
context followed by every choice's continuation, and an attention mask lets each continuation
see the context and itself only (never another choice); position ids restart after the context
for each continuation, so every token sits where it would in its own (context, choice)
sequence. The last token of a continuation is never fed (nothing is predicted from it), so
one-token choices (MMLU's letters) add nothing to the row: one pass over the context scores them
all. The logits that predict continuation tokens are the only ones needed: the context's last
position (the first token of every choice) and each fed continuation token.

Rows are built from :class:`~catwalk_steps.scoring.sequences.ChoiceSequence` objects, so the
tokenization rule stays in `SequenceEncoder.pair`. Choices whose contexts differ in tokens (one
context per choice, or contexts left-truncated by different amounts) get one row each: exactly
today's one-sequence-per-choice computation, in the same forward.

Everything here builds CPU tensors; :mod:`~catwalk_steps.scoring.shared_context` runs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from .sequences import ChoiceSequence

CONTEXT_SEGMENT = 0
PAD_SEGMENT = -1


@dataclass(frozen=True)
class PackedRow:
    """One context and the continuations scored against it.

    `sequences[k]` is the position, in the caller's list of sequences, of the (context,
    continuation `k`) sequence; its score goes there.
    """

    context: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    sequences: tuple[int, ...]

    @property
    def length(self) -> int:
        """Tokens fed: the context and every continuation but its last token."""
        return len(self.context) + sum(len(c) - 1 for c in self.continuations)


def context_of(sequence: ChoiceSequence) -> tuple[int, ...]:
    return sequence.token_ids[: len(sequence.token_ids) - sequence.continuation_length]


def packed_rows(sequences: Sequence[ChoiceSequence]) -> list[PackedRow]:
    """Sequences grouped into rows: those of one instance with the same context tokens share a
    row; any other sequence is a row of its own. Rows keep the order of first appearance."""
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for k, sequence in enumerate(sequences):
        groups.setdefault((sequence.instance, context_of(sequence)), []).append(k)
    rows = []
    for (_, context), members in groups.items():
        continuations = tuple(sequences[k].token_ids[len(context) :] for k in members)
        rows.append(PackedRow(context, continuations, tuple(members)))
    return rows


def row_batches(
    sequences: Sequence[ChoiceSequence], batch_size: int
) -> list[tuple[list[int], list[PackedRow]]]:
    """The sequences' rows, longest first, in batches of at most `batch_size` sequences (a row
    with more choices than that is a batch of its own): the longest batch comes first, so
    running out of memory shows at once, and rows of similar length share a batch (little
    padding). Each batch is (the indices of its sequences in `sequences`, its rows numbering
    those sequences 0, 1, ... in that order)."""
    batches: list[tuple[list[int], list[PackedRow]]] = []
    chosen: list[int] = []
    rows: list[PackedRow] = []
    for row in sorted(packed_rows(sequences), key=lambda r: -r.length):
        if chosen and len(chosen) + len(row.sequences) > batch_size:
            batches.append((chosen, rows))
            chosen, rows = [], []
        local = tuple(range(len(chosen), len(chosen) + len(row.sequences)))
        rows.append(replace(row, sequences=local))
        chosen.extend(row.sequences)
    if chosen:
        batches.append((chosen, rows))
    return batches


def pack_rows(rows: Sequence[PackedRow], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded rows as CPU tensors (keys start with `packed_`).

    - `packed_input_ids`, `packed_position_ids`: [rows, length];
    - `packed_segments`: 0 for context tokens, k + 1 for continuation k's, -1 for padding;
      the attention mask is derived from it on the model's device;
    - `packed_predict_rows`, `packed_predict_cols`: the positions whose logits are computed,
      each once (a context's last position predicts the first token of all its choices);
    - `packed_target_ids`, `packed_target_predictor` (which predicting position),
      `packed_target_sequence` (which sequence's score the log-probability adds to).
    """
    length = max(row.length for row in rows)
    ids, positions, segments = [], [], []
    predict_rows: list[int] = []
    predict_cols: list[int] = []
    targets: dict[str, list[int]] = {"ids": [], "predictor": [], "sequence": []}
    for r, row in enumerate(rows):
        start = len(row.context)
        row_ids, row_positions = list(row.context), list(range(start))
        row_segments = [CONTEXT_SEGMENT] * start
        shared = len(predict_rows)  # the context's last position predicts every first token
        predict_rows.append(r)
        predict_cols.append(start - 1)
        for k, (continuation, sequence) in enumerate(
            zip(row.continuations, row.sequences, strict=True)
        ):
            fed = len(continuation) - 1  # the last token predicts nothing we score
            first = len(predict_rows)
            predict_rows.extend([r] * fed)
            predict_cols.extend(range(len(row_ids), len(row_ids) + fed))
            row_ids.extend(continuation[:-1])
            row_positions.extend(range(start, start + fed))  # as if right after the context
            row_segments.extend([CONTEXT_SEGMENT + 1 + k] * fed)
            targets["ids"].extend(continuation)
            targets["predictor"].extend([shared, *range(first, first + fed)])
            targets["sequence"].extend([sequence] * len(continuation))
        padding = length - len(row_ids)
        ids.append(row_ids + [pad_id] * padding)
        positions.append(row_positions + [0] * padding)
        segments.append(row_segments + [PAD_SEGMENT] * padding)
    return {
        "packed_input_ids": torch.tensor(ids),
        "packed_position_ids": torch.tensor(positions),
        "packed_segments": torch.tensor(segments),
        "packed_predict_rows": torch.tensor(predict_rows),
        "packed_predict_cols": torch.tensor(predict_cols),
        **{f"packed_target_{name}": torch.tensor(values) for name, values in targets.items()},
    }


def packed_attention(
    segments: torch.Tensor, positions: torch.Tensor | None = None, window: int | None = None
) -> torch.Tensor:
    """[rows, 1, length, length] boolean mask (True: may attend) from the segments.

    A token sees the earlier tokens of the context and of its own continuation; with a sliding
    `window`, only those fewer than `window` positions before its own. A padding
    token sees itself only: a query that sees nothing gives NaN in attention, and a NaN in
    a padding position's values would reach real tokens through their zero weights.
    """
    length = segments.size(1)
    index = torch.arange(length, device=segments.device)
    causal = index[:, None] >= index[None, :]
    query = segments[:, :, None]
    key = segments[:, None, :]
    real = (query != PAD_SEGMENT) & (key != PAD_SEGMENT)
    visible = causal & real & ((key == CONTEXT_SEGMENT) | (key == query))
    if window is not None and positions is not None:
        visible &= (positions[:, :, None] - positions[:, None, :]) < window
    return (visible | torch.eye(length, dtype=torch.bool, device=segments.device))[:, None]
