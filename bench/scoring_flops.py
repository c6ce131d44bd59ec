"""What each scoring path must compute, counted from its batches: the compute floor that a
requests/s figure sits on.

A token fed through the model costs about 2 FLOPs per weight of the body's matrix products
(attention's score and value products, which grow with the sequence, are left out: at these
lengths they are a few percent); a position at which the LM head runs costs 2 FLOPs per weight
of the head. Padding counts (a padded position is computed). The batches are each path's own:

- lm-eval 0.4.13 (`HFLM._loglikelihood_tokens`): requests whose inputs are equal but for the
  last continuation token are run once (its `group_by="contexts"`: MMLU's one-token answers);
  the rest sorted longest first, batches of `batch_size`, each padded to its longest; every
  input position goes through the head, and through the float32 log-softmax;
- before (`sequence_batch_scores`, batched by `sequence_batches`): sequences longest first,
  padded to the longest; the head from the batch's first continuation position on
  (`logits_from`);
- shared (`packed_batch_scores`): packed rows in `row_batches`, padded to the longest row; the
  head only at predicting positions (`packed_predict_rows`).

When two paths reach about the same GFLOP/s, the ratio of their requests/s is the ratio of the
work they must do, and no faster code for the same exact scores changes it.
"""

from __future__ import annotations

import torch

from catwalk_steps.scoring.choices import sequence_batches
from catwalk_steps.scoring.packing import pack_rows, row_batches
from catwalk_steps.scoring.sequences import pad_sequences


def matmul_weights(lm: torch.nn.Module) -> tuple[int, int]:
    """(body, head): weights of the matrix products per token in the body (embeddings are
    lookups, left out) and in the LM head."""
    embeddings = {
        id(p)
        for module in lm.modules()
        if isinstance(module, torch.nn.Embedding)
        for p in module.parameters()
    }
    head = lm.get_output_embeddings().weight
    body = sum(
        p.numel()
        for p in lm.parameters()
        if p.dim() == 2 and id(p) not in embeddings and p is not head
    )
    return body, head.numel()


def lmeval_positions(sequences, batch_size: int) -> tuple[int, int]:
    """(fed, head) positions of lm-eval's batches."""
    inputs = {s.token_ids[:-1] for s in sequences}  # equal inputs run once
    ordered = sorted(inputs, key=len, reverse=True)
    fed = 0
    for start in range(0, len(ordered), batch_size):
        batch = ordered[start : start + batch_size]
        fed += len(batch) * len(batch[0])
    return fed, fed


def before_positions(sequences, batch_size: int) -> tuple[int, int]:
    fed = head = 0
    for batch in sequence_batches(sequences, batch_size):
        tensors = pad_sequences([sequences[k] for k in batch], 0)
        rows, length = tensors["input_ids"].shape
        fed += rows * (length - 1)  # the last position is never fed
        head += rows * (length - tensors["logits_from"])
    return fed, head


def shared_positions(sequences, batch_size: int) -> tuple[int, int]:
    fed = head = 0
    for _, rows in row_batches(sequences, batch_size):
        packed = pack_rows(rows, 0)
        fed += packed["packed_input_ids"].numel()
        head += packed["packed_predict_rows"].numel()
    return fed, head


def gflop_per_request(lm: torch.nn.Module, sequences, batch_size: int) -> dict[str, float]:
    """Each path's GFLOP per request (per (context, choice) sequence)."""
    body, head = matmul_weights(lm)
    counts = {
        "lm-eval": lmeval_positions(sequences, batch_size),
        "before": before_positions(sequences, batch_size),
        "shared": shared_positions(sequences, batch_size),
    }
    return {
        path: 2 * (fed * body + at_head * head) / len(sequences) / 1e9
        for path, (fed, at_head) in counts.items()
    }
