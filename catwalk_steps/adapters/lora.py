"""LoRA (Hu et al., 2021) behind the adapter interface (:mod:`.base`), built by peft.

peft injects its LoRA layers in place (`inject_adapter_in_model`), so the model stays the
Hugging Face model it was: every engine wraps, shards and checkpoints it as before, and only the
adapters' parameters require gradients. What is decided here, once for every engine:

- the block `{type: 'lora', r, alpha, dropout, target_modules}`, checked (no peft needed);
- which layers get an adapter (:mod:`.targets`): linear or convolution layers;
- the adapters' first weights: LoRA's standard init (`A` as a linear layer's, `B` zero, so the
  model starts as its base), drawn from the model's `init_seed` per weight name, so that every
  rank, every engine and a rank that builds only its own shard start from the same adapters;
- merging them into the base weights, for a model that loads without peft.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from ..errors import is_number
from .base import ADAPTER_NAME, AdapterType, base_name, draw_weights, parse_targets
from .targets import is_conv1d, linear_classes, target_names

DEFAULTS: dict[str, Any] = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": None}


@dataclass(frozen=True)
class LoraSpec:
    """A LoRA adapter, as peft builds it: each targeted layer `W` computes
    `W x + (alpha / r) B A x`, with `A` (r x in) and `B` (out x r) the only weights trained.

    :ivar target_modules: regexes over module names (as `modules_to_wrap` matches them), or None
        for peft's default layers of the model's family.
    """

    r: int = 8
    alpha: float = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] | None = None
    type: str = "lora"

    @classmethod
    def parse(cls, given: Mapping[str, Any], field: str) -> LoraSpec:
        """The keys checked, each bad value one line naming it."""
        values = {**DEFAULTS, **given}
        r, alpha, dropout = values["r"], values["alpha"], values["dropout"]
        if not (isinstance(r, int) and not isinstance(r, bool) and r > 0):
            raise ConfigurationError(f"{field}.r: the adapter's rank, an integer > 0, got {r!r}")
        if not (is_number(alpha) and alpha > 0):
            raise ConfigurationError(
                f"{field}.alpha: a number > 0 (the update is scaled by alpha / r), got {alpha!r}"
            )
        if not (is_number(dropout) and 0 <= dropout < 1):
            raise ConfigurationError(f"{field}.dropout: a number in [0, 1), got {dropout!r}")
        targets = parse_targets(values["target_modules"], f"{field}.target_modules")
        return cls(r=r, alpha=alpha, dropout=float(dropout), target_modules=targets)

    def as_config(self) -> dict[str, Any]:
        config = asdict(self)
        if self.target_modules is not None:
            config["target_modules"] = list(self.target_modules)
        return config


def adaptable_classes() -> tuple[type, ...]:
    """The layers LoRA adapts here: linear ones and convolutions."""
    nn = torch.nn
    return (*linear_classes(), nn.Conv1d, nn.Conv2d, nn.Conv3d)


def lora_config(spec: LoraSpec, names: list[str], transposed: bool) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,  # type: ignore[arg-type]  # peft says int, takes any number
        lora_dropout=spec.dropout,
        target_modules=sorted(names),
        fan_in_fan_out=transposed,
        bias="none",
    )


class LoraType(AdapterType):
    name = "lora"
    title = "LoRA"
    peft_type = "LORA"
    keys = DEFAULTS

    def parse(self, given: Mapping[str, Any], field: str) -> LoraSpec:
        return LoraSpec.parse(given, field)

    def attach(self, owner: torch.nn.Module, lm: torch.nn.Module, spec: Any, seed: int) -> None:
        from peft import inject_adapter_in_model
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as TABLE

        adapts = (adaptable_classes(), "not a linear or convolution layer; LoRA adapts those")
        names = target_names(owner, lm, spec.target_modules, TABLE, adapts)
        config = lora_config(spec, names, transposed=is_conv1d(lm, names[0]))
        with torch.random.fork_rng(devices=[]):  # peft's own init draws; the global RNG is kept
            inject_adapter_in_model(config, lm, adapter_name=ADAPTER_NAME)
        draw_weights(lm, self, seed)

    def is_weight(self, name: str) -> bool:
        return ".lora_A." in name or ".lora_B." in name

    def initial_weights(
        self, shapes: Iterable[tuple[str, torch.Size]], seed: int
    ) -> dict[str, torch.Tensor]:
        """LoRA's init: `A` kaiming-uniform as a linear layer's (peft's
        `init_lora_weights=True`) and `B` zero. Each weight is drawn from its own generator,
        seeded by `seed` and its name."""
        values = {}
        for name, shape in shapes:
            tensor = torch.zeros(shape)
            if ".lora_A." in name:
                generator = torch.Generator().manual_seed(
                    seed * 1_000_003 + zlib.crc32(name.encode())
                )
                torch.nn.init.kaiming_uniform_(tensor, a=math.sqrt(5), generator=generator)
            elif ".lora_B." not in name:
                raise ValueError(f"{name}: not a LoRA weight")
            values[name] = tensor
        return values

    def merged_state(self, lm: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Each adapted weight plus its layer's delta (peft's `get_delta_weight`:
        `(alpha / r) B A`, in the weight's own layout), every other weight as it is."""
        from peft.tuners.lora import LoraLayer

        deltas = {}
        for name, module in lm.named_modules():
            if isinstance(module, LoraLayer):
                with torch.no_grad():
                    delta = module.get_delta_weight(ADAPTER_NAME)  # type: ignore[attr-defined]
                    deltas[f"{name}.base_layer.weight"] = delta
        state = {}
        for name, tensor in lm.state_dict().items():
            if self.is_weight(name):
                continue
            if name in deltas:
                tensor = tensor + deltas[name].to(tensor.dtype)
            state[base_name(name)] = tensor
        return state

    def describe(self, config: Mapping[str, Any]) -> str:
        return f"{self.title} r={config['r']} alpha={config['alpha']:g}"


ADAPTER = LoraType()
