"""The adapter interface: one object per adapter type, asked by every stage.

An adapter type (LoRA, IA3, ...) answers for everything that differs between types, so that
engines, checkpoints and reports never name one:

- its settings: the keys of the model block's `adapter`, checked (:meth:`AdapterType.parse`);
- what it injects into the model, and which parameters then train (:meth:`~AdapterType.attach`);
- its state's names (:meth:`~AdapterType.is_weight`) and first values
  (:meth:`~AdapterType.initial_weights`), which a sharded engine draws rank by rank;
- the merged model, for a directory that loads without peft (:meth:`~AdapterType.merged_state`);
- the units an engine that flattens parameters must wrap (:meth:`~AdapterType.flattened_units`);
- what the run card says (:meth:`~AdapterType.describe`);
- the base alone, the adapter switched off in the same model (:meth:`~AdapterType.switched_off`:
  a reference model for DPO).

Every type is injected by peft, in place: the model stays the Hugging Face model it was, and
its adapter is saved as the peft directory (:mod:`.peft_directory`) whatever its type. Types
are registered in :mod:`.registry`.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Protocol

import torch
from tango.common.exceptions import ConfigurationError

from catwalk_startup.one_line import closest

from ..module_names import compile_patterns

ADAPTER_NAME = "default"  # peft's name for a model's one adapter
FIELD = "model.adapter"


class AdapterSpec(Protocol):
    """A checked `adapter` block: its `type` and the JSON that identifies it."""

    @property
    def type(self) -> str: ...

    def as_config(self) -> dict[str, Any]:
        """The block as JSON (the model's cache identity, the run card, `catwalk_model.json`)."""
        ...


class AdapterType(ABC):
    """What one adapter type answers (one instance per type, registered by its `name`)."""

    name: ClassVar[str]  # the block's `type`
    title: ClassVar[str]  # as people write it (`LoRA`)
    peft_type: ClassVar[str]  # peft's `PeftType` value (`LORA`): how a model says its type
    keys: ClassVar[dict[str, Any]]  # the block's keys besides `type`, with their defaults

    @abstractmethod
    def parse(self, given: Mapping[str, Any], field: str) -> AdapterSpec:
        """The block's keys (without `type`, each already one of :attr:`keys`) checked, each
        bad value one line naming its key."""

    @abstractmethod
    def attach(self, owner: torch.nn.Module, lm: torch.nn.Module, spec: Any, seed: int) -> None:
        """Injects the adapter into `lm` (in place; regexes are matched in `owner`) with its
        first weights (drawn from `seed`); only the adapter requires gradients afterwards. On
        the meta device (a skeleton) there are no weights to give."""

    @abstractmethod
    def is_weight(self, name: str) -> bool:
        """Whether a state-dict name is one of this type's weights."""

    @abstractmethod
    def initial_weights(
        self, shapes: Iterable[tuple[str, torch.Size]], seed: int
    ) -> dict[str, torch.Tensor]:
        """The adapter's first weights by name (on the CPU), each computable alone, so that any
        rank (a sharded engine's, building only its own rows) draws what every rank draws."""

    @abstractmethod
    def merged_state(self, lm: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The state dict of the merged model (the adapter folded into the base weights, under
        the names the model has without adapters), computed beside the model, which keeps its
        adapter."""

    def flattened_units(self, model: torch.nn.Module) -> list[str] | None:
        """The modules an engine that flattens each unit's parameters into one (FairScale) wraps
        as units of their own, deepest first, so that every unit is all trained or all frozen;
        None for the smallest modules that train (the engine finds them)."""
        return None

    def describe(self, config: Mapping[str, Any]) -> str:
        """How the run card names the adapter of this `as_config()` (`LoRA r=8 alpha=16`)."""
        return self.title

    @contextlib.contextmanager
    def switched_off(self, lm: torch.nn.Module) -> Iterator[None]:
        """The adapter's layers in `lm` switched off while active: the base model, in the same
        modules (torchtune's and TRL's reference for a LoRA run). Every type's layers are
        peft's, which switch off alike."""
        from peft.tuners.tuners_utils import BaseTunerLayer

        layers = [m for m in lm.modules() if isinstance(m, BaseTunerLayer)]
        for layer in layers:
            layer.enable_adapters(False)
        try:
            yield
        finally:
            for layer in layers:
                layer.enable_adapters(True)


def draw_weights(lm: torch.nn.Module, adapter: AdapterType, seed: int) -> None:
    """Gives the parameters that train (the adapter's) their first weights, unless on meta."""
    weights = [(n, p) for n, p in lm.named_parameters() if p.requires_grad]
    if weights and weights[0][1].device.type != "meta":
        values = adapter.initial_weights(((n, p.shape) for n, p in weights), seed)
        with torch.no_grad():
            for name, parameter in weights:
                parameter.copy_(values[name])


def check_keys(given: Mapping[str, Any], keys: Iterable[str], title: str, field: str) -> None:
    """Every key is one the type takes: else one line naming it and the closest."""
    known = sorted(keys)
    for key in given:
        if key not in known:
            close = closest(key, known)
            hint = f"did you mean '{close}'? " if close else ""
            raise ConfigurationError(
                f"{field}.{key}: {title} has no such key; {hint}(it takes {', '.join(known)})"
            )


def parse_targets(targets: Any, field: str) -> tuple[str, ...] | None:
    """A `target_modules`-like key: a non-empty list of regexes over module names, or None."""
    if targets is None:
        return None
    if not (
        isinstance(targets, (list, tuple)) and targets and all(isinstance(t, str) for t in targets)
    ):
        raise ConfigurationError(
            f"{field}: a non-empty list of regexes over module names, or left out for the "
            f"family's default layers; got {targets!r}"
        )
    compile_patterns(targets, field)
    return tuple(targets)


def base_name(name: str) -> str:
    """A base weight's name as the model has it without adapters (peft's
    `...c_attn.base_layer.weight` is `...c_attn.weight`)."""
    return name.replace(".base_layer.", ".")


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, all) parameters: adapters against the whole model (tied weights once)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())
