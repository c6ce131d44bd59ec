"""`objective: 'lm'` (the default): the right answer's tokens, as language modelling trains on
them: the right choice's continuation of a multiple-choice instance (as catwalk trains rank
classification), or a generative task's answer (SFT; packed rows give the same loss:
:func:`~catwalk_steps.scoring.packed_documents.document_loss`). Its training batches score the
right choices only: the others are not in its loss."""

from __future__ import annotations

import torch

from .base import ChoiceScores, Examples, Objective, weighted_mean


def lm_loss(
    right_scores: torch.Tensor,
    right_continuation_mask: torch.Tensor,
    right_instances: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    """Mean over instances of the right continuation's mean token NLL.

    `right_*` describe the right choices' sequences. Averaging per instance (not per token)
    keeps the loss of a batch independent of how it is split across ranks or micro-batches.
    """
    num_tokens = right_continuation_mask.sum(dim=1).clamp(min=1)
    per_instance = torch.zeros_like(labels, dtype=torch.float32).index_put(
        (right_instances,), -right_scores / num_tokens
    )
    return weighted_mean(per_instance, weights)


def right_answer_loss(choices: ChoiceScores) -> torch.Tensor:
    """:func:`lm_loss` of a batch of choices."""
    return lm_loss(
        choices.right, choices.right_mask, choices.right_instances, choices.labels, choices.weights
    )


class Lm(Objective):
    name = "lm"
    trains_on = (Examples.CHOICES, Examples.ANSWERS)
    scores_every_choice = False

    def choice_loss(self, choices: ChoiceScores) -> torch.Tensor:
        return right_answer_loss(choices)


LM = Lm()
