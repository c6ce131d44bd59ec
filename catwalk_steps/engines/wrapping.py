"""Choosing inner modules, and wrapping them, for every engine.

One rule serves FSDP units and activation checkpointing alike (:func:`select_modules`), from
the engine's `modules_to_wrap`:

- left out (None): the model's own repeated blocks, the modules whose class it declares in
  Hugging Face's `_no_split_modules` (`GPT2Block`, `LlamaDecoderLayer`, ...), as accelerate's
  FSDP plugin wraps them; a model that declares none is an error saying to give the list;
- `[]`: no inner module, on purpose (FSDP then has the root alone);
- regexes: each must `re.fullmatch` a module name from `named_modules()`; one that matches
  nothing is an error that lists the closest module names.

Modules are returned children first, so nested ones wrap inside out (a parent wrapped first
would move its children's names). Regexes match as every option over module names does
(:mod:`catwalk_steps.module_names`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence

import torch
from tango.common.exceptions import ConfigurationError
from torch.utils.checkpoint import checkpoint

from ..module_names import matches_per_pattern, replace_module, spellings, wrapping_root

NOTHING_TO_RECOMPUTE = (
    "training_engine.activation_checkpointing: modules_to_wrap is [], so no module is "
    "recomputed; leave modules_to_wrap out (the model's blocks) or name the modules"
)


def select_modules(
    model: torch.nn.Module,
    modules_to_wrap: Sequence[str] | None,
    field: str = "modules_to_wrap",
) -> list[str]:
    """The inner modules an engine wraps, deepest first: the model's blocks when
    `modules_to_wrap` is None, none for `[]`, else the regexes' matches."""
    if modules_to_wrap is None:
        return find_blocks(model, field)
    return match_modules(model, modules_to_wrap, field) if modules_to_wrap else []


def _deepest_first(model: torch.nn.Module, chosen: Sequence[str]) -> list[str]:
    position = {name: index for index, (name, _) in enumerate(model.named_modules())}
    return sorted(chosen, key=lambda n: (-n.count("."), position[n]))


def match_modules(
    model: torch.nn.Module, patterns: Sequence[str], field: str = "modules_to_wrap"
) -> list[str]:
    """Names of the modules that the patterns select, deepest first (stable otherwise)."""
    matched: list[str] = []
    for _, hits in matches_per_pattern(model, patterns, field, blocks_hint(model)):
        matched.extend(h for h in hits if h not in matched)
    return _deepest_first(model, matched)


def block_classes(model: torch.nn.Module) -> list[str]:
    """The block classes the model declares: every `_no_split_modules` in it (transformers sets
    it on each pretrained model; the rank classifier's is its `lm`'s), first seen first."""
    declared: list[str] = []
    for module in model.modules():
        for name in sorted(getattr(module, "_no_split_modules", None) or ()):
            if name not in declared:
                declared.append(name)
    return declared


def blocks_hint(model: torch.nn.Module) -> str:
    """For a regex that matches nothing (another family's, say): the model's own blocks, which
    leaving `modules_to_wrap` out would wrap."""
    classes = block_classes(model)
    if not any(type(module).__name__ in classes for module in model.modules()):
        return ""
    return f" (or leave modules_to_wrap out to wrap the model's blocks: {', '.join(classes)})"


def find_blocks(model: torch.nn.Module, field: str = "modules_to_wrap") -> list[str]:
    """Every module whose class the model declares as a block, deepest first."""
    classes = block_classes(model)
    names = [n for n, m in model.named_modules() if n and type(m).__name__ in classes]
    if not names:
        if classes:
            found = f"has no module of its block classes ({', '.join(classes)})"
        else:
            found = "declares no block classes (_no_split_modules)"
        suggestion = suggest_pattern(model)
        example = f" (for this model: {json.dumps([suggestion])})" if suggestion else ""
        raise ConfigurationError(
            f"{field}: left out, so the model's blocks would be wrapped, but "
            f"{language_model_name(model)} {found}; give modules_to_wrap{example}, "
            "or [] for the root alone"
        )
    return _deepest_first(model, names)


def language_model_name(model: torch.nn.Module) -> str:
    """The class name of the model that wrapping works on (the rank classifier's `lm`)."""
    root = wrapping_root(model)
    return type(model.get_submodule(root) if root else model).__name__


def describe_blocks(model: torch.nn.Module, names: Sequence[str]) -> str:
    """What the selected modules are, by class: `2 x GPT2Block`."""
    counts = Counter(type(model.get_submodule(name)).__name__ for name in names)
    return ", ".join(f"{count} x {kind}" for kind, count in counts.items())


def suggest_pattern(model: torch.nn.Module) -> str | None:
    """A regex that makes each repeated block (the children of the largest ModuleList) a unit,
    spelled as `modules_to_wrap` accepts it (without the rank classifier's `lm.`)."""
    lists = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ModuleList) and len(module)
    ]
    if not lists:
        return None
    name, _ = max(lists, key=lambda item: len(item[1]))
    return re.escape(spellings(model, name)[-1]) + r"\.[0-9]+"


def trainable_units(model: torch.nn.Module) -> list[str]:
    """The smallest modules whose parameters all train while others in the model stay frozen
    (an adapter's own layers), deepest first; none when every parameter trains. An engine
    that flattens each unit's parameters into one (FairScale), and so needs one
    `requires_grad` per unit, wraps each of these as a unit of its own."""
    frozen = any(not p.requires_grad for p in model.parameters())
    if not frozen:
        return []
    names: list[str] = []
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        trains = name and own and all(p.requires_grad for p in module.parameters())
        if trains and not any(name.startswith(chosen + ".") for chosen in names):
            names.append(name)
    return _deepest_first(model, names)


def check_uniform_units(model: torch.nn.Module, names: Sequence[str], field: str) -> None:
    """Each unit's own parameters (those no deeper unit claims; the root's: what no unit
    claims) all train or are all frozen: a unit flattened into one parameter cannot be both."""
    units = [*names, ""]
    claimed: set[int] = set()
    for name in units:
        module = model.get_submodule(name) if name else model
        own = [p for p in module.parameters() if id(p) not in claimed]
        claimed.update(id(p) for p in own)
        if len({p.requires_grad for p in own}) > 1:
            raise ConfigurationError(
                f"{field}: unit {name or '(root)'} holds both trained and frozen parameters, and "
                "FairScale flattens a unit into one parameter; wrap the trained modules as units "
                "of their own or use catwalk::torch_fsdp"
            )


def wrap_modules(
    model: torch.nn.Module,
    names: Sequence[str],
    wrap: Callable[[torch.nn.Module], torch.nn.Module],
) -> None:
    """Replaces each named module by `wrap(module)`, in the given (children first) order."""
    for name in names:
        replace_module(model, name, wrap(model.get_submodule(name)))


def checkpoint_activations(module: torch.nn.Module) -> torch.nn.Module:
    """Recomputes `module`'s activations in backward instead of storing them.

    Uses non-reentrant `torch.utils.checkpoint`, which works under autocast and inside FSDP
    units. The forward is replaced in place, so parameter names (and checkpoints) do not change.
    """
    if getattr(module, "_catwalk_checkpointed", False):
        return module
    original_forward = module.forward

    def forward(*args, **kwargs):
        return checkpoint(original_forward, *args, use_reentrant=False, **kwargs)

    module.forward = forward
    vars(module)["_catwalk_checkpointed"] = True  # as setattr does for a non-tensor
    return module
