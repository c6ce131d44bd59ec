"""The model block's `adapter` as a typed object, checked once: `{type: 'lora', r, alpha,
dropout, target_modules}`. Read without peft, so the graph-build checks and the model's cache
identity do not import it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import closest
from ..module_names import compile_patterns

KINDS = ("lora",)
DEFAULTS: dict[str, Any] = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": None}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class LoraSpec:
    """A LoRA adapter (Hu et al., 2021), as peft builds it: each targeted layer `W` computes
    `W x + (alpha / r) B A x`, with `A` (r x in) and `B` (out x r) the only weights trained.

    :ivar target_modules: regexes over module names (as `modules_to_wrap` matches them), or None
        for peft's default layers of the model's family.
    """

    r: int = DEFAULTS["r"]
    alpha: float = DEFAULTS["alpha"]
    dropout: float = DEFAULTS["dropout"]
    target_modules: tuple[str, ...] | None = DEFAULTS["target_modules"]
    type: str = "lora"

    @classmethod
    def parse(cls, block: Any, field: str = "model.adapter") -> LoraSpec:
        """The block checked, each bad key one line naming it."""
        if isinstance(block, LoraSpec):
            return block
        if not isinstance(block, Mapping):
            raise ConfigurationError(
                f"{field}: a block such as {{type: 'lora', r: 8}}, got {block!r}"
            )
        given = dict(block)
        kind = given.pop("type", None)
        if kind not in KINDS:
            raise ConfigurationError(f"{field}.type: one of {list(KINDS)}, got {kind!r}")
        for key in given:
            if key not in DEFAULTS:
                close = closest(key, sorted(DEFAULTS))
                hint = f"did you mean '{close}'? " if close else ""
                raise ConfigurationError(
                    f"{field}.{key}: LoRA has no such key; {hint}(it takes "
                    f"{', '.join(sorted(DEFAULTS))})"
                )
        values = {**DEFAULTS, **given}
        r, alpha, dropout = values["r"], values["alpha"], values["dropout"]
        if not (isinstance(r, int) and not isinstance(r, bool) and r > 0):
            raise ConfigurationError(f"{field}.r: the adapter's rank, an integer > 0, got {r!r}")
        if not (_number(alpha) and alpha > 0):
            raise ConfigurationError(
                f"{field}.alpha: a number > 0 (the update is scaled by alpha / r), got {alpha!r}"
            )
        if not (_number(dropout) and 0 <= dropout < 1):
            raise ConfigurationError(f"{field}.dropout: a number in [0, 1), got {dropout!r}")
        targets = values["target_modules"]
        if targets is not None:
            if not (
                isinstance(targets, (list, tuple))
                and targets
                and all(isinstance(t, str) for t in targets)
            ):
                raise ConfigurationError(
                    f"{field}.target_modules: a non-empty list of regexes over module names, or "
                    f"left out for the family's default layers; got {targets!r}"
                )
            compile_patterns(targets, f"{field}.target_modules")
            targets = tuple(targets)
        return cls(r=r, alpha=alpha, dropout=float(dropout), target_modules=targets)

    def as_config(self) -> dict[str, Any]:
        """The block as JSON (the model's cache identity, the run card, `catwalk_model.json`)."""
        config = asdict(self)
        if self.target_modules is not None:
            config["target_modules"] = list(self.target_modules)
        return config


def parse_adapter(block: Any, field: str = "model.adapter") -> LoraSpec | None:
    return None if block is None else LoraSpec.parse(block, field)
