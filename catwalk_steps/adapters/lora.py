"""LoRA adapters in a rank classifier's language model, built by peft.

peft injects its LoRA layers in place (`inject_adapter_in_model`), so the model stays the
Hugging Face model it was: every engine wraps, shards and checkpoints it as before, and only the
adapters' parameters require gradients. What is decided here, once for every engine:

- which layers get an adapter: the `target_modules` regexes, matched as `modules_to_wrap` is
  (:mod:`catwalk_steps.module_names`), or peft's default layers for the model's family; each must
  be a linear or convolution layer;
- the adapters' first weights: LoRA's standard init (`A` as a linear layer's, `B` zero, so the
  model starts as its base), drawn from the model's `init_seed` per weight name, so that every
  rank, every engine and a rank that builds only its own shard start from the same adapters;
- merging them into the base weights, for a model that loads without peft.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from ..module_names import matches_per_pattern
from .spec import LoraSpec

ADAPTER_NAME = "default"  # peft's name for a model's one adapter
FIELD = "model.adapter.target_modules"


def adaptable_classes() -> tuple[type, ...]:
    """The layers LoRA adapts here: linear ones (and transformers' GPT-2-style `Conv1D`, a
    linear layer stored transposed) and convolutions."""
    from transformers.pytorch_utils import Conv1D

    nn = torch.nn
    return (nn.Linear, Conv1D, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def default_targets(lm: torch.nn.Module) -> list[str]:
    """peft's default layers for the model's family (`gpt2`: `c_attn`; `llama`: `q_proj`,
    `v_proj`; ...), as names in the model."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as TABLE

    model_type = getattr(getattr(lm, "config", None), "model_type", None)
    suffixes = TABLE.get(model_type or "")
    if not suffixes:
        raise ConfigurationError(
            f"{FIELD}: left out, but peft has no default layers for model type {model_type!r}; "
            "give regexes over module names (e.g. ['.*\\\\.q_proj', '.*\\\\.v_proj'])"
        )
    names = [
        name
        for name, _ in lm.named_modules()
        if any(name == s or name.endswith("." + s) for s in suffixes)
    ]
    if not names:
        raise ConfigurationError(
            f"{FIELD}: left out, but the model has none of peft's default layers for "
            f"{model_type!r} ({', '.join(suffixes)}); give regexes over module names"
        )
    return names


def target_names(owner: torch.nn.Module, lm: torch.nn.Module, spec: LoraSpec) -> list[str]:
    """The names (in `lm`) of the layers that get an adapter. Regexes are matched in `owner`,
    the rank classifier, so they may be written with or without its `lm.`."""
    if spec.target_modules is None:
        names = default_targets(lm)
        check_adaptable(lm, [("(peft's default)", names)])
        return names
    prefix = next(n for n, m in owner.named_modules() if m is lm) + "."
    matched = [
        (pattern, [name.removeprefix(prefix) for name in hits if name.startswith(prefix)])
        for pattern, hits in matches_per_pattern(owner, spec.target_modules, FIELD)
    ]
    check_adaptable(lm, matched)
    names = []
    for _, hits in matched:
        names.extend(h for h in hits if h not in names)
    return names


def check_adaptable(lm: torch.nn.Module, matched: list[tuple[str, list[str]]]) -> None:
    """Every matched module is a layer LoRA adapts, and all are of one orientation (peft's
    `fan_in_fan_out` is one setting per adapter)."""
    classes = adaptable_classes()
    for pattern, names in matched:
        for name in names:
            module = lm.get_submodule(name)
            if not isinstance(module, classes):
                inner = next(
                    (n for n, m in module.named_modules() if n and isinstance(m, classes)), None
                )
                example = f" (e.g. {name}.{inner})" if inner else ""
                raise ConfigurationError(
                    f"{FIELD}: pattern {pattern!r} matches {name} ({type(module).__name__}), "
                    f"not a linear or convolution layer; LoRA adapts those{example}"
                )
    transposed = {name for _, names in matched for name in names if _is_conv1d(lm, name)}
    every = {name for _, names in matched for name in names}
    if transposed and transposed != every:
        raise ConfigurationError(
            f"{FIELD}: mixes transformers Conv1D layers ({sorted(transposed)[0]}) and other "
            f"layers ({sorted(every - transposed)[0]}); peft adapts one kind per adapter"
        )


def _is_conv1d(lm: torch.nn.Module, name: str) -> bool:
    from transformers.pytorch_utils import Conv1D

    return isinstance(lm.get_submodule(name), Conv1D)


def lora_config(spec: LoraSpec, names: list[str], transposed: bool) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,  # type: ignore[arg-type]  # peft says int; a float scales the same
        lora_dropout=spec.dropout,
        target_modules=sorted(names),
        fan_in_fan_out=transposed,
        bias="none",
    )


def attach(owner: torch.nn.Module, lm: torch.nn.Module, spec: LoraSpec, seed: int) -> None:
    """Injects the adapters into `lm` (in place) and gives them their first weights; only they
    require gradients afterwards. On the meta device (a skeleton) there are no weights to give."""
    from peft import inject_adapter_in_model

    names = target_names(owner, lm, spec)
    config = lora_config(spec, names, transposed=_is_conv1d(lm, names[0]))
    with torch.random.fork_rng(devices=[]):  # peft's own init draws; the global RNG is kept
        inject_adapter_in_model(config, lm, adapter_name=ADAPTER_NAME)
    weights = [(n, p) for n, p in lm.named_parameters() if p.requires_grad]
    if weights and weights[0][1].device.type != "meta":
        values = initial_weights(((n, p.shape) for n, p in weights), seed)
        with torch.no_grad():
            for name, parameter in weights:
                parameter.copy_(values[name])


def initial_weights(shapes: Iterable[tuple[str, torch.Size]], seed: int) -> dict[str, torch.Tensor]:
    """The adapters' first weights by name (on the CPU): LoRA's init, `A` kaiming-uniform as a
    linear layer's (peft's `init_lora_weights=True`) and `B` zero. Each weight is drawn from its
    own generator, seeded by `seed` and its name, so any rank can compute any weight alone."""
    values = {}
    for name, shape in shapes:
        tensor = torch.zeros(shape)
        if ".lora_A." in name:
            generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            torch.nn.init.kaiming_uniform_(tensor, a=math.sqrt(5), generator=generator)
        elif ".lora_B." not in name:
            raise ValueError(f"{name}: not a LoRA weight")
        values[name] = tensor
    return values


def is_adapter_weight(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def base_name(name: str) -> str:
    """A base weight's name as the model has it without adapters (`...c_attn.base_layer.weight`
    is `...c_attn.weight`)."""
    return name.replace(".base_layer.", ".")


def merged_state(lm: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict of the merged model (each adapter folded into its base layer, the plain
    Hugging Face model as transformers loads it), computed beside the model, which keeps its
    adapters: each adapted weight plus its layer's delta (peft's
    `get_delta_weight`: `(alpha / r) B A`, in the weight's own layout), every other weight as
    it is, under the names the model has without adapters."""
    from peft.tuners.lora import LoraLayer

    deltas = {}
    for name, module in lm.named_modules():
        if isinstance(module, LoraLayer):
            with torch.no_grad():
                # Each LoraLayer peft makes (Linear, Conv1D, Embedding) has it; the mixin has not.
                delta = module.get_delta_weight(ADAPTER_NAME)  # type: ignore[attr-defined]
                deltas[f"{name}.base_layer.weight"] = delta
    state = {}
    for name, tensor in lm.state_dict().items():
        if is_adapter_weight(name):
            continue
        if name in deltas:
            tensor = tensor + deltas[name].to(tensor.dtype)
        state[base_name(name)] = tensor
    return state


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, all) parameters: adapters against the whole model (tied weights once)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())
