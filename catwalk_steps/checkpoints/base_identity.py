"""The frozen base an adapter checkpoint was trained on, by name and content.

An adapter run's checkpoints hold the adapter alone; the base comes back from its source (a
hub name, a local directory, or a config and seed) when the run resumes or is exported. Each
checkpoint's manifest records that source and, for a local directory, the SHA-256 of each of
its weight files, so a resume onto a base that changed (files replaced in place, another
directory) fails in one line instead of training the adapter on top of other weights.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from ..file_digests import file_digests
from ..remote import is_hub_name
from ..scoring.rank_classifier import RankClassifier

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def classifier_in(model: torch.nn.Module) -> RankClassifier | None:
    return next((m for m in model.modules() if isinstance(m, RankClassifier)), None)


def weight_digests(directory: Path) -> dict[str, str]:
    """Each weight file of a local model directory and its SHA-256 (each file hashed once
    while it is unchanged: :mod:`catwalk_steps.file_digests`)."""
    paths = [
        path
        for path in sorted(directory.iterdir())
        if path.is_file() and path.suffix in WEIGHT_SUFFIXES
    ]
    return dict(zip([path.name for path in paths], file_digests(paths), strict=True))


def directory_digest(directory: Path) -> str:
    """One SHA-256 over every file of a model directory (weights, config, tokenizer, an
    `adapter/` inside) by name and content, each file hashed once while it is unchanged
    (:mod:`catwalk_steps.file_digests`: in any process, so a step graph built again reads no
    weights). Hidden files and folders (`.git`, a download's `.cache`), which no loader reads,
    and temporary files are left out."""
    directory = Path(directory)
    paths = []
    for root, folders, found in os.walk(directory):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        paths += [
            Path(root) / name
            for name in found
            if not name.startswith(".") and not name.endswith(".tmp")
        ]
    paths = sorted(path for path in paths if path.is_file())
    names = [str(path.relative_to(directory)) for path in paths]
    files = dict(zip(names, file_digests(paths), strict=True))
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def base_identity(model: torch.nn.Module) -> dict[str, Any] | None:
    """What the base of a model that trains an adapter is (None for any other model)."""
    classifier = classifier_in(model)
    if classifier is None or classifier.adapter is None:
        return None
    spec = classifier.base_spec
    identity: dict[str, Any] = {"spec": spec}
    pretrained = spec.get("pretrained")
    if pretrained and not is_hub_name(pretrained) and Path(pretrained).is_dir():
        identity["weights"] = weight_digests(Path(pretrained))
    return identity


def base_problem(checkpoint: Path, recorded: Any, current: dict[str, Any] | None) -> str | None:
    """Why the checkpoint's weights do not belong to this run's model (an adapter onto another
    base, an adapter into a run that trains the whole model or the other way round), or None."""
    if recorded == current:
        return None
    if current is None:
        return f"{checkpoint}: holds an adapter, but this run trains the whole model"
    if recorded is None:
        return f"{checkpoint}: holds a whole model, but this run trains an adapter on its base"
    then, now = recorded.get("spec") or {}, current.get("spec") or {}
    if then != now:
        differ = [key for key in sorted({*then, *now}) if then.get(key) != now.get(key)]
        said = "; ".join(f"{key} {then.get(key)!r} there, {now.get(key)!r} here" for key in differ)
        return f"{checkpoint}: its adapter was trained on another base ({said})"
    changed = sorted(
        name
        for name in {*recorded.get("weights", {}), *current.get("weights", {})}
        if recorded.get("weights", {}).get(name) != current.get("weights", {}).get(name)
    )
    return (
        f"{checkpoint}: its adapter was trained on {current['spec'].get('pretrained')} as it was "
        f"then; {', '.join(changed[:3])} changed since (SHA-256 differs)"
    )
