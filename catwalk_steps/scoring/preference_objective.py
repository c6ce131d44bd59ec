"""What a rank classifier computes for a batch of preference pairs (the preference kind's
collate: :mod:`catwalk_steps.kinds.preference`): each answer's summed log-probability from the
packed pair (the prompt run once for both answers, :mod:`.preference`), and, where the batch
has the reference's log-probabilities (a `catwalk::reference_logprobs` step) or the model has an
adapter (the reference is its base with the adapter off, in the same model: the one rule,
:func:`~catwalk_steps.objectives.base.reference_from`), the DPO loss of its `dpo` settings and
TRL's per-pair metrics (:mod:`catwalk_steps.objectives.dpo`). A mixin of
:class:`.rank_classifier.RankClassifier`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..adapters.registry import type_of
from ..objectives import DPO, Objective, Reference, reference_from
from ..objectives.base import weighted_mean
from ..objectives.dpo import DpoSettings
from ..objectives.dpo_loss import METRICS
from .preference import answer_logps

# TRL's metric names (:data:`catwalk_steps.objectives.dpo_loss.METRICS`), per pair here: the
# kind sums them, TRL logs their means. The reward accuracy first: what validation picks the
# best checkpoint by.
REWARDS_CHOSEN, REWARDS_REJECTED, ACCURACIES, MARGINS, LOGPS_CHOSEN, LOGPS_REJECTED = METRICS
PAIR_METRICS = (ACCURACIES, MARGINS, REWARDS_CHOSEN, REWARDS_REJECTED, LOGPS_CHOSEN, LOGPS_REJECTED)


class PreferenceScoring:
    """DPO over a causal LM (`lm`), for :class:`.rank_classifier.RankClassifier`."""

    lm: Any
    adapter: Any  # the adapter's spec, or None
    objective: Objective  # the model's training objective
    dpo: DpoSettings  # the `dpo` block (TRL's defaults when the objective is another)
    training: bool

    def reference_logps(
        self, preference: Mapping[str, torch.Tensor], given: Sequence[Sequence[float]] | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The reference's (chosen, rejected) summed log-probabilities: given with the batch
        (a list of numbers: engines cast no list to their compute dtype), else, by the one
        rule, the base with the adapter off where the model has one; None without either."""
        if given is not None:
            device = next(iter(preference.values())).device
            values = torch.tensor(given, dtype=torch.float32, device=device)
            return values[:, 0], values[:, 1]
        if reference_from(self.adapter) is not Reference.ADAPTER_OFF:
            return None
        with torch.no_grad(), type_of(self.adapter).switched_off(self.lm):
            chosen, rejected, _, _ = answer_logps(self.lm, preference)
        return chosen.float(), rejected.float()

    def preference_outputs(
        self,
        preference: Mapping[str, torch.Tensor],
        weights: torch.Tensor,
        reference: Sequence[Sequence[float]] | None = None,
    ) -> dict[str, Any]:
        """The loss (a weighted mean over the pairs) and each pair's metrics; without a
        reference, each answer's log-probability only (what a reference model answers)."""
        chosen, rejected, chosen_tokens, rejected_tokens = answer_logps(self.lm, preference)
        outputs: dict[str, Any] = {
            LOGPS_CHOSEN: chosen.detach().float(),
            LOGPS_REJECTED: rejected.detach().float(),
        }
        ref = self.reference_logps(preference, reference)
        if ref is None:
            if self.training:
                raise RuntimeError(
                    f"objective {self.objective.name!r}: the batch has no reference "
                    "log-probabilities and the model no adapter to switch off"
                )
            return outputs
        tokens = (chosen_tokens, rejected_tokens)
        losses, metrics = DPO.pair_loss(self.dpo, (chosen, rejected), ref, tokens)
        outputs["loss"] = weighted_mean(losses, weights.float())
        outputs.update({name: metrics[name] for name in METRICS})
        return outputs
