"""The layers an adapter goes into, one rule for every type: the block's `target_modules`
regexes, matched as `modules_to_wrap` is (:mod:`catwalk_steps.module_names`), or peft's default
layers of the model's family for the type; each a layer the type adapts, all of one
orientation (peft's `fan_in_fan_out` is one setting per adapter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from tango.common.exceptions import ConfigurationError

from ..module_names import matches_per_pattern

FIELD = "model.adapter.target_modules"


def linear_classes() -> tuple[type, ...]:
    """Linear layers: torch's, and transformers' GPT-2-style `Conv1D` (stored transposed)."""
    from transformers.pytorch_utils import Conv1D

    return (torch.nn.Linear, Conv1D)


def default_targets(lm: torch.nn.Module, table: Mapping[str, Sequence[str]]) -> list[str]:
    """peft's default layers for the model's family (`table`: peft's mapping for the type, e.g.
    `gpt2`: `c_attn`), as names in the model."""
    model_type = getattr(getattr(lm, "config", None), "model_type", None)
    suffixes = table.get(model_type) if isinstance(model_type, str) else None
    if not suffixes:
        raise ConfigurationError(
            f"{FIELD}: left out, but peft has no default layers for model type {model_type!r}; "
            "give regexes over module names (e.g. ['.*\\\\.q_proj', '.*\\\\.v_proj'])"
        )
    names = [name for name, _ in lm.named_modules() if ends_with_any(name, suffixes)]
    if not names:
        raise ConfigurationError(
            f"{FIELD}: left out, but the model has none of peft's default layers for "
            f"{model_type!r} ({', '.join(suffixes)}); give regexes over module names"
        )
    return names


def ends_with_any(name: str, suffixes: Sequence[str]) -> bool:
    """Whether a module name is, or ends in, one of `suffixes` (peft's rule for its tables)."""
    return any(name == s or name.endswith("." + s) for s in suffixes)


def matched_in(
    owner: torch.nn.Module, lm: torch.nn.Module, patterns: Sequence[str], field: str
) -> list[tuple[str, list[str]]]:
    """Each pattern with the names (in `lm`) it matches. Patterns are matched in `owner`, the
    rank classifier, so they may be written with or without its `lm.`."""
    prefix = next(n for n, m in owner.named_modules() if m is lm) + "."
    return [
        (pattern, [name.removeprefix(prefix) for name in hits if name.startswith(prefix)])
        for pattern, hits in matches_per_pattern(owner, patterns, field)
    ]


def target_names(
    owner: torch.nn.Module,
    lm: torch.nn.Module,
    patterns: Sequence[str] | None,
    table: Mapping[str, Sequence[str]],
    adapts: tuple[tuple[type, ...], str],
) -> list[str]:
    """The names (in `lm`) of the layers that get an adapter: those `patterns` match, or the
    family's defaults in `table` when None; `adapts`: the layer classes the type adapts and
    the sentence that says so."""
    if patterns is None:
        defaults = default_targets(lm, table)
        check_adaptable(lm, [("(peft's default)", defaults)], adapts)
        return defaults
    matched = matched_in(owner, lm, patterns, FIELD)
    check_adaptable(lm, matched, adapts)
    names: list[str] = []
    for _, hits in matched:
        names.extend(h for h in hits if h not in names)
    return names


def check_adaptable(
    lm: torch.nn.Module,
    matched: list[tuple[str, list[str]]],
    adapts: tuple[tuple[type, ...], str],
) -> None:
    """Every matched module is a layer the type adapts, and all are of one orientation."""
    classes, sentence = adapts
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
                    f"{sentence}{example}"
                )
    transposed = {name for _, names in matched for name in names if is_conv1d(lm, name)}
    every = {name for _, names in matched for name in names}
    if transposed and transposed != every:
        raise ConfigurationError(
            f"{FIELD}: mixes transformers Conv1D layers ({sorted(transposed)[0]}) and other "
            f"layers ({sorted(every - transposed)[0]}); peft adapts one kind per adapter"
        )


def is_conv1d(lm: torch.nn.Module, name: str) -> bool:
    from transformers.pytorch_utils import Conv1D

    return isinstance(lm.get_submodule(name), Conv1D)
