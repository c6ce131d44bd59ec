"""The `dpo` block of a model trained with `objective: 'dpo'`: DPO and its common variants as
TRL's `DPOTrainer` names them (`beta`, `loss_type`, `label_smoothing`, `rpo_alpha`), read and
checked once, each bad value one line naming its key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from tango.common.exceptions import ConfigurationError

# sigmoid: DPO (with label_smoothing: conservative DPO); robust: robust DPO; each computed by
# :func:`catwalk_steps.scoring.preference_loss.pair_losses`.
LOSS_TYPES = ("sigmoid", "ipo", "hinge", "robust")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
        given = dict(given or {})
        known = [f.name for f in fields(cls)]
        for key in given:
            if key not in known:
                raise ConfigurationError(
                    f"{field}.{key}: no such key (it takes {', '.join(known)})"
                )
        settings = cls(**given)
        settings.check(field)
        return settings

    def check(self, field: str) -> None:
        if not (_number(self.beta) and self.beta > 0):
            raise ConfigurationError(f"{field}.beta: a number > 0, got {self.beta!r}")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigurationError(
                f"{field}.loss_type: one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}"
            )
        smoothing = self.label_smoothing
        if not (_number(smoothing) and 0 <= smoothing < 0.5):
            raise ConfigurationError(
                f"{field}.label_smoothing: a number in [0, 0.5), got {smoothing!r}"
            )
        if self.rpo_alpha is not None and not (_number(self.rpo_alpha) and self.rpo_alpha >= 0):
            raise ConfigurationError(f"{field}.rpo_alpha: a number >= 0, got {self.rpo_alpha!r}")

    def as_config(self) -> dict[str, Any]:
        return asdict(self)
