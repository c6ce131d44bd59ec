"""IA3 (Liu et al., 2022, "(IA)^3") behind the adapter interface (:mod:`.base`), built by peft.

Each targeted linear layer learns one vector that rescales it: its outputs (`l * (W x + b)`),
or, for a feedforward layer, its inputs (`W (l * x) + b`). The vectors start at one, so the
model starts as its base, and are the only weights trained: far fewer than LoRA's.

- the block `{type: 'ia3', target_modules, feedforward_modules}`, checked (no peft needed);
- which layers (:mod:`.targets`): linear layers (transformers' `Conv1D` included), by regex or
  peft's IA3 defaults for the family; which of them are feedforward, by regex (a subset of
  the targets) or the targets among peft's feedforward defaults for the family;
- merging: each vector multiplied into its layer's weight (and, scaling outputs, its bias).

An IA3 layer uses its vector directly rather than through a module, so an engine that flattens
units (FairScale) wraps each IA3 layer and the base layer inside it as two units
(:meth:`IA3Type.flattened_units`): the vector alone trains in the outer one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from .base import ADAPTER_NAME, AdapterType, base_name, draw_weights, parse_targets
from .targets import ends_with_any, is_conv1d, linear_classes, matched_in, target_names

DEFAULTS = {"target_modules": None, "feedforward_modules": None}
FEEDFORWARD = "model.adapter.feedforward_modules"


@dataclass(frozen=True)
class IA3Spec:
    """An IA3 adapter, as peft builds it.

    :ivar target_modules: regexes over module names (as `modules_to_wrap` matches them), or None
        for peft's IA3 default layers of the model's family.
    :ivar feedforward_modules: regexes choosing, among the targets, those whose inputs are
        scaled (the others' outputs are), or None for the targets among peft's defaults.
    """

    target_modules: tuple[str, ...] | None = None
    feedforward_modules: tuple[str, ...] | None = None
    type: str = "ia3"

    def as_config(self) -> dict[str, Any]:
        config = asdict(self)
        for key in DEFAULTS:
            if config[key] is not None:
                config[key] = list(config[key])
        return config


def feedforward_names(
    owner: torch.nn.Module, lm: torch.nn.Module, spec: IA3Spec, targets: list[str]
) -> list[str]:
    """The targets whose inputs are scaled; a pattern matching a layer that is no target is
    one line naming it."""
    if spec.feedforward_modules is None:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING

        model_type = getattr(getattr(lm, "config", None), "model_type", None)
        table = TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING
        suffixes = table.get(model_type, []) if isinstance(model_type, str) else []
        return [name for name in targets if ends_with_any(name, suffixes)]
    names: list[str] = []
    for pattern, hits in matched_in(owner, lm, spec.feedforward_modules, FEEDFORWARD):
        outside = [name for name in hits if name not in targets]
        if outside:
            raise ConfigurationError(
                f"{FEEDFORWARD}: pattern {pattern!r} matches {outside[0]}, which is not among "
                "the target_modules (feedforward layers are a subset of the targets)"
            )
        names.extend(name for name in hits if name not in names)
    return names


def ia3_config(targets: list[str], feedforward: list[str], transposed: bool) -> Any:
    """peft's config; the feedforward layers as one regex of their whole names (`fullmatch`:
    peft matches a list of names by suffix)."""
    from peft import IA3Config

    every = "|".join(re.escape(name) for name in sorted(feedforward))
    return IA3Config(
        target_modules=sorted(targets),
        feedforward_modules=f"(?:{every})" if feedforward else "(?!)",  # (?!): matches nothing
        fan_in_fan_out=transposed,
    )


class IA3Type(AdapterType):
    name = "ia3"
    title = "IA3"
    peft_type = "IA3"
    keys = DEFAULTS

    def parse(self, given: Mapping[str, Any], field: str) -> IA3Spec:
        targets = parse_targets(given.get("target_modules"), f"{field}.target_modules")
        feedforward = given.get("feedforward_modules")
        if feedforward is not None and not (
            isinstance(feedforward, (list, tuple)) and all(isinstance(f, str) for f in feedforward)
        ):
            raise ConfigurationError(
                f"{field}.feedforward_modules: a list of regexes over module names ([] for "
                f"none), or left out for the family's default layers; got {feedforward!r}"
            )
        if feedforward:
            parse_targets(feedforward, f"{field}.feedforward_modules")
        chosen = tuple(feedforward) if feedforward is not None else None
        return IA3Spec(target_modules=targets, feedforward_modules=chosen)

    def attach(self, owner: torch.nn.Module, lm: torch.nn.Module, spec: Any, seed: int) -> None:
        from peft import inject_adapter_in_model
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING as TABLE

        adapts = (linear_classes(), "not a linear layer; IA3 adapts those")
        targets = target_names(owner, lm, spec.target_modules, TABLE, adapts)
        feedforward = feedforward_names(owner, lm, spec, targets)
        config = ia3_config(targets, feedforward, transposed=is_conv1d(lm, targets[0]))
        with torch.random.fork_rng(devices=[]):  # peft's own init draws; the global RNG is kept
            inject_adapter_in_model(config, lm, adapter_name=ADAPTER_NAME)
        draw_weights(lm, self, seed)

    def is_weight(self, name: str) -> bool:
        return ".ia3_l." in name

    def initial_weights(
        self, shapes: Iterable[tuple[str, torch.Size]], seed: int
    ) -> dict[str, torch.Tensor]:
        """IA3's init (peft's `init_ia3_weights=True`): ones; nothing is drawn."""
        values = {}
        for name, shape in shapes:
            if not self.is_weight(name):
                raise ValueError(f"{name}: not an IA3 weight")
            values[name] = torch.ones(shape)
        return values

    def merged_state(self, lm: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Each adapted weight times its vector (in the weight's own layout, as peft's `merge`),
        a bias too where outputs are scaled; every other weight as it is."""
        from peft.tuners.ia3 import IA3Layer
        from peft.utils.other import transpose

        scaled = {}
        with torch.no_grad():
            for name, module in lm.named_modules():
                if not isinstance(module, IA3Layer):
                    continue
                vector = module.ia3_l[ADAPTER_NAME]
                transposed = getattr(module, "fan_in_fan_out", False)  # IA3 Linear's setting
                scaled[f"{name}.base_layer.weight"] = transpose(vector, transposed)
                if not module.is_feedforward:
                    scaled[f"{name}.base_layer.bias"] = vector.flatten()
        state = {}
        for name, tensor in lm.state_dict().items():
            if self.is_weight(name):
                continue
            if name in scaled:
                tensor = (tensor * scaled[name]).to(tensor.dtype)
            state[base_name(name)] = tensor
        return state

    def flattened_units(self, model: torch.nn.Module) -> list[str]:
        """Each IA3 layer's base layer (frozen), then the IA3 layer, whose own parameter is its
        vector (trained)."""
        from peft.tuners.ia3 import IA3Layer

        units = []
        for name, module in model.named_modules():
            if isinstance(module, IA3Layer):
                units.extend([f"{name}.base_layer", name])
        return units


ADAPTER = IA3Type()
