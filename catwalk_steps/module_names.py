"""Modules chosen by regex over their names, one rule for every option that takes such a list
(an engine's `modules_to_wrap`, an adapter's `target_modules`): each regex must `re.fullmatch` a
name from `named_modules()`, and one that matches nothing is an error listing the closest names.

A model that holds another (the rank classifier its `lm`) says so by its interface,
:class:`ModuleNaming`: names under that child can then also be written without its prefix, as
in the Hugging Face model's own `named_modules()` (`transformer\\.h\\.[0-9]+` as well as
`lm\\.transformer\\.h\\.[0-9]+`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

import torch
from tango.common.exceptions import ConfigurationError


def _compile(pattern: str, field: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigurationError(f"{field}: invalid regex {pattern!r} ({e})") from None


def compile_patterns(patterns: Sequence[str], field: str = "modules_to_wrap") -> list[re.Pattern]:
    """The patterns compiled; an invalid one is a configuration error naming it."""
    return [_compile(pattern, field) for pattern in patterns]


class ModuleNaming:
    """What a model says of its modules' names, for every option that chooses modules by name:
    `wrapping_root`, the child whose modules may also be named without its prefix (the rank
    classifier's "lm"); None: each name is written whole."""

    wrapping_root: str | None = None


def wrapping_root(model: torch.nn.Module) -> str | None:
    """The model's `wrapping_root`, where its class declares one (:class:`ModuleNaming`)."""
    return model.wrapping_root if isinstance(model, ModuleNaming) else None


def spellings(model: torch.nn.Module, name: str) -> tuple[str, ...]:
    """The ways a module's name may be written: whole, and without the model's `wrapping_root`."""
    root = wrapping_root(model)
    if root and name.startswith(root + "."):
        return name, name[len(root) + 1 :]
    return (name,)


def closest_names(pattern: str, names: Sequence[str], count: int = 5) -> list[str]:
    """Module names most like `pattern`, read as text (regex escapes removed)."""
    text = pattern.replace("\\", "")
    close = difflib.get_close_matches(text, names, n=count, cutoff=0.0)
    return close or list(names[:count])


def matches_per_pattern(
    model: torch.nn.Module, patterns: Sequence[str], field: str, hint: str = ""
) -> list[tuple[str, list[str]]]:
    """Each pattern with the module names it matches, in `named_modules()` order; a pattern that
    matches nothing fails naming it, the closest names and `hint`."""
    names = [name for name, _ in model.named_modules() if name]
    found = []
    for pattern in compile_patterns(patterns, field):
        hits = [n for n in names if any(pattern.fullmatch(s) for s in spellings(model, n))]
        if not hits:
            raise ConfigurationError(
                f"{field}: pattern {pattern.pattern!r} matches no module; "
                f"closest module names: {', '.join(closest_names(pattern.pattern, names))}{hint}"
            )
        found.append((pattern.pattern, hits))
    return found


def replace_module(model: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    """Puts `new` where the module called `name` is."""
    parent_name, _, child_name = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    parent.add_module(child_name, new)
