"""What a rank classifier computes for a batch of preference pairs (the preference kind's
collate: :mod:`catwalk_steps.kinds.preference`): each answer's summed log-probability from the
packed pair (the prompt run once for both answers, :mod:`.preference`), and, where the batch
has the reference's log-probabilities (a `catwalk::reference_logprobs` step) or the model has an
adapter (the reference is its base with the adapter off, in the same model), the DPO loss of
its `dpo` settings and TRL's per-pair metrics. A mixin of
:class:`.rank_classifier.RankClassifier`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from ..settings.preference import DpoSettings
from .preference import answer_logps
from .preference_loss import METRICS, preference_loss

# TRL's metric names (:data:`.preference_loss.METRICS`), per pair here: the kind sums them,
# TRL logs their means. The reward accuracy first: what validation picks the best checkpoint by.
REWARDS_CHOSEN, REWARDS_REJECTED, ACCURACIES, MARGINS, LOGPS_CHOSEN, LOGPS_REJECTED = METRICS
PAIR_METRICS = (ACCURACIES, MARGINS, REWARDS_CHOSEN, REWARDS_REJECTED, LOGPS_CHOSEN, LOGPS_REJECTED)


@contextlib.contextmanager
def adapters_off(lm: torch.nn.Module) -> Iterator[None]:
    """peft's adapter layers switched off while active: the base model, in the same modules
    (torchtune's and TRL's reference for a LoRA run)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in lm.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


class PreferenceScoring:
    """DPO over a causal LM (`lm`), for :class:`.rank_classifier.RankClassifier`."""

    lm: Any
    adapter: Any  # the adapter's spec, or None
    dpo: DpoSettings  # the `dpo` block (TRL's defaults when the objective is another)
    training: bool

    def reference_logps(
        self, preference: Mapping[str, torch.Tensor], given: Sequence[Sequence[float]] | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The reference's (chosen, rejected) summed log-probabilities: given with the batch
        (a list of numbers: engines cast no list to their compute dtype), else the base with
        the adapter off; None without either."""
        if given is not None:
            device = next(iter(preference.values())).device
            values = torch.tensor(given, dtype=torch.float32, device=device)
            return values[:, 0], values[:, 1]
        if self.adapter is None:
            return None
        with torch.no_grad(), adapters_off(self.lm):
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
                    "objective 'dpo': the batch has no reference log-probabilities and the "
                    "model no adapter to switch off"
                )
            return outputs
        settings = self.dpo
        losses, metrics = preference_loss(
            chosen,
            rejected,
            ref[0],
            ref[1],
            beta=settings.beta,
            loss_type=settings.loss_type,
            label_smoothing=settings.label_smoothing,
            rpo_alpha=settings.rpo_alpha,
            chosen_tokens=chosen_tokens,
            rejected_tokens=rejected_tokens,
        )
        weights = weights.float()
        outputs["loss"] = (losses * weights).sum() / weights.sum().clamp(min=1.0)
        outputs.update({name: metrics[name] for name in METRICS})
        return outputs
