"""Choosing inner modules by regex, and wrapping them, for every engine.

One matching rule serves FSDP units and activation checkpointing alike: a pattern must
`re.fullmatch` a module name from `named_modules()`. Matches are returned children first, so
nested matches wrap inside out (a parent wrapped first would move its children's names).
A pattern that matches nothing is an error that lists the closest module names.

Models may set `wrapping_root` (the rank classifier sets "lm"): names under it can then also be
written without that prefix, as in the Hugging Face model's own `named_modules()`
(`transformer\\.h\\.[0-9]+` as well as `lm\\.transformer\\.h\\.[0-9]+`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

import torch
from tango.common.exceptions import ConfigurationError
from torch.utils.checkpoint import checkpoint


def _compile(pattern: str, field: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigurationError(f"{field}: invalid regex {pattern!r} ({e})") from None


def compile_patterns(patterns: Sequence[str], field: str = "modules_to_wrap") -> list[re.Pattern]:
    """The patterns compiled; an invalid one is a configuration error naming it."""
    return [_compile(pattern, field) for pattern in patterns]


def _spellings(model: torch.nn.Module, name: str) -> tuple[str, ...]:
    root = getattr(model, "wrapping_root", None)
    if root and name.startswith(root + "."):
        return name, name[len(root) + 1 :]
    return (name,)


def match_modules(
    model: torch.nn.Module, patterns: Sequence[str], field: str = "modules_to_wrap"
) -> list[str]:
    """Names of the modules that the patterns select, deepest first (stable otherwise)."""
    compiled = compile_patterns(patterns, field)
    names = [name for name, _ in model.named_modules() if name]
    matched: list[str] = []
    for pattern in compiled:
        hits = [n for n in names if any(pattern.fullmatch(s) for s in _spellings(model, n))]
        if not hits:
            raise ConfigurationError(
                f"{field}: pattern {pattern.pattern!r} matches no module; "
                f"closest module names: {', '.join(closest_names(pattern.pattern, names))}"
            )
        matched.extend(h for h in hits if h not in matched)
    position = {name: index for index, name in enumerate(names)}
    return sorted(matched, key=lambda n: (-n.count("."), position[n]))


def closest_names(pattern: str, names: Sequence[str], count: int = 5) -> list[str]:
    """Module names most like `pattern`, read as text (regex escapes removed)."""
    text = pattern.replace("\\", "")
    close = difflib.get_close_matches(text, names, n=count, cutoff=0.0)
    return close or list(names[:count])


def replace_module(model: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent_name, _, child_name = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    parent.add_module(child_name, new)


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
    module._catwalk_checkpointed = True
    return module
