"""`objective: 'dpo'`: DPO and its common variants on preference pairs, as TRL's `DPOTrainer`
trains them (the losses, pure: :mod:`.dpo_loss`).

- its settings: the model block's `dpo` block (:class:`DpoSettings`: `beta`, `loss_type`,
  `label_smoothing`, `rpo_alpha`, TRL's names and defaults), each bad value one line naming
  its key;
- it trains on preference pairs (the preference kind's examples), against a reference: the
  log-probabilities of a `catwalk::reference_logprobs` step, carried by its batches with the
  pairs, or, for a model with an adapter, its base with the adapter off
  (:func:`~.base.reference_from`);
- its batches: each pair packed with the prompt once, each pair's weight, and the reference's
  log-probabilities where a reference step computed them (the preference kind's collate; the
  rank classifier's forward: :mod:`catwalk_steps.scoring.preference_objective`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from ..errors import is_number
from .base import ChoiceScores, Examples, Objective, block_keys
from .dpo_loss import LOSS_TYPES, preference_loss
from .lm import right_answer_loss


@dataclass(frozen=True)
class DpoSettings:
    """:ivar beta: how far the policy may move from the reference (TRL's default 0.1).
    :ivar loss_type: "sigmoid" (DPO), "robust" (robust DPO), "ipo" (answers' log-probabilities
        averaged over their tokens), "hinge" (SLiC).
    :ivar label_smoothing: the chance a preference is flipped (conservative DPO with
        "sigmoid", robust DPO with "robust"), in [0, 0.5).
    :ivar rpo_alpha: the weight of an SFT term on the chosen answers (RPO); None: none."""

    beta: float = 0.1
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0
    rpo_alpha: float | None = None

    @classmethod
    def of(cls, given: Mapping[str, Any] | None, field: str = "model.dpo") -> DpoSettings:
        given = block_keys(cls, given, field)
        settings = cls(**given)
        settings.check(field)
        return settings

    def check(self, field: str) -> None:
        if not (is_number(self.beta) and self.beta > 0):
            raise ConfigurationError(f"{field}.beta: a number > 0, got {self.beta!r}")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigurationError(
                f"{field}.loss_type: one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}"
            )
        smoothing = self.label_smoothing
        if not (is_number(smoothing) and 0 <= smoothing < 0.5):
            raise ConfigurationError(
                f"{field}.label_smoothing: a number in [0, 0.5), got {smoothing!r}"
            )
        if self.rpo_alpha is not None and not (is_number(self.rpo_alpha) and self.rpo_alpha >= 0):
            raise ConfigurationError(f"{field}.rpo_alpha: a number >= 0, got {self.rpo_alpha!r}")

    def as_config(self) -> dict[str, Any]:
        return asdict(self)


class Dpo(Objective):
    name = "dpo"
    trains_on = (Examples.PAIRS,)
    settings = DpoSettings
    compares_with_reference = True

    def choice_loss(self, choices: ChoiceScores) -> torch.Tensor:
        """A model trained on pairs, scored on choices (an evaluation): the right answer's
        NLL, as `lm`'s."""
        return right_answer_loss(choices)

    def pair_loss(
        self,
        settings: DpoSettings,
        policy: tuple[torch.Tensor, torch.Tensor],
        reference: tuple[torch.Tensor, torch.Tensor],
        tokens: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(loss per pair, TRL's metrics per pair) of the policy's and the reference's
        (chosen, rejected) summed log-probabilities, by `settings`; `tokens`: the answers'
        token counts."""
        return preference_loss(
            *policy,
            *reference,
            beta=settings.beta,
            loss_type=settings.loss_type,
            label_smoothing=settings.label_smoothing,
            rpo_alpha=settings.rpo_alpha,
            chosen_tokens=tokens[0],
            rejected_tokens=tokens[1],
        )


DPO = Dpo()
