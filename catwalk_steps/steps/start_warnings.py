"""Warnings when training starts: settings that work but are probably not what was meant (FSDP
over the root alone, more CPU processes than cores, answers cut by max_length), one line each."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from tango.integrations.torch import DataLoader, TrainingEngine

from ..scoring.tokenization import load_tokenizer
from ..training.components import lazy_config, registered_name
from .preflight import SHARDED_ENGINES, model_skeleton


def wrapping_suggestion(skeleton: Any) -> str | None:
    """A regex that makes each repeated block (the children of the largest ModuleList) a unit."""
    import re

    import torch

    if skeleton is None:
        return None
    lists = [
        (name, module)
        for name, module in skeleton.named_modules()
        if isinstance(module, torch.nn.ModuleList)
    ]
    if not lists:
        return None
    name, _ = max(lists, key=lambda item: len(item[1]))
    root = getattr(skeleton, "wrapping_root", None)
    if root and name.startswith(root + "."):
        name = name[len(root) + 1 :]
    return re.escape(name) + r"\.[0-9]+"


def training_warnings(
    engine: tuple[Any, dict[str, Any]], model_lazy: Any, device_type: str, local_workers: int
) -> list[str]:
    """Settings that work but are probably not what was meant, one line each. `engine` is the
    engine's (class, keys), as :func:`~catwalk_steps.training.components.lazy_config` reads it."""
    warnings = []
    constructor, params = engine
    name = registered_name(TrainingEngine, constructor)
    if name in SHARDED_ENGINES and not params.get("modules_to_wrap"):
        suggestion = wrapping_suggestion(model_skeleton(model_lazy))
        hint = f" (for this model: modules_to_wrap: ['{suggestion}'])" if suggestion else ""
        warnings.append(
            f"training_engine.modules_to_wrap: empty, so FSDP shards only the root, gathers the "
            f"whole model for every forward and saves no memory; wrap the blocks{hint}"
        )
    cores = os.cpu_count() or 1
    if device_type == "cpu" and local_workers > cores:
        warnings.append(
            f"train.device_count: {local_workers} CPU processes on {cores} cores share them and "
            "slow each other down; use at most one process per core"
        )
    return warnings


def answers_cut(instances: Iterable[Any], tokenizer: Any, max_length: int) -> int:
    """How many instances have an answer longer than `max_length` tokens (it is cut: the answer
    is scored whole only when it fits)."""
    instances = list(instances)
    choices = sorted({choice for instance in instances for choice in instance.choices})
    if not choices:
        return 0
    lengths = dict(
        zip(
            choices,
            map(len, tokenizer(choices, add_special_tokens=False)["input_ids"]),
            strict=True,
        )
    )
    return sum(any(lengths[c] > max_length for c in i.choices) for i in instances)


def cut_answer_warnings(dataset_dict: Any, loader: Any, splits: Iterable[str | None]) -> list[str]:
    """Answers are scored whole only when they fit in the collate's max_length: say how many do
    not, per split."""
    collate = lazy_config(loader, DataLoader, "train_dataloader")[1].get("collate_fn") or {}
    if "tokenizer" not in collate:
        return []
    max_length = collate.get("max_length", 256)
    tokenizer = load_tokenizer(collate["tokenizer"], "train_dataloader.collate_fn.tokenizer")
    warnings = []
    for split in filter(None, splits):
        cut = answers_cut(dataset_dict[split], tokenizer, max_length)
        if cut:
            warnings.append(
                f"collate_fn.max_length: {cut} of {len(dataset_dict[split])} {split} instances "
                f"have an answer longer than {max_length} tokens, which is cut (answers are "
                "otherwise scored whole); raise max_length"
            )
    return warnings
