"""`objective: 'rank'`: cross-entropy over each instance's choices' scores (their summed
continuation log-probabilities), so the right choice is ranked first; a task without choices
(a generative one) has nothing to rank."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import ChoiceScores, Examples, Objective, weighted_mean


def rank_loss(scores: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The weighted mean over instances of the cross-entropy of their choices' `scores`
    ([instances, choices]; -inf for a choice an instance lacks) against the right one."""
    return weighted_mean(F.cross_entropy(scores, labels, reduction="none"), weights)


class Rank(Objective):
    name = "rank"
    trains_on = (Examples.CHOICES,)

    def choice_loss(self, choices: ChoiceScores) -> torch.Tensor:
        assert choices.every is not None, "the rank objective scores every choice"
        return rank_loss(choices.every, choices.labels, choices.weights)


RANK = Rank()
