"""A rank classifier saved as a standard Hugging Face directory (and, with an adapter, the
merged model beside peft's adapter directory): what `from_pretrained` loads outside Tango."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def with_umask_permissions(directory: Path) -> None:
    """Every file in `directory` gets the permissions of a file created here now."""
    mask = os.umask(0)
    os.umask(mask)
    for path in directory.iterdir():
        if path.is_file():
            path.chmod(0o666 & ~mask)


def save_model_directory(model: Any, directory: Path, adapter_only: bool = False) -> None:
    """Writes a standard Hugging Face directory: `from_pretrained` loads it outside Tango.
    Every file gets the permissions of a file created here (transformers writes the weights
    0600, through a temporary file, the rest with the umask's).

    A model with an adapter writes the merged model (the adapter folded into the base
    weights) and, in `adapter/`, the peft adapter directory (`PeftModel.from_pretrained(base,
    directory / "adapter")`); with `adapter_only`, the adapter directory alone, into
    `directory`. The model itself keeps its adapter."""
    if model.adapter is not None:
        from ..adapters.peft_directory import ADAPTER_DIR, write_adapter_directory
        from ..adapters.registry import type_of

        base = model.spec["pretrained"]
        write_adapter_directory(
            model.lm, directory if adapter_only else directory / ADAPTER_DIR, base
        )
        if adapter_only:
            with_umask_permissions(directory)
            return
        merged = type_of(model.adapter).merged_state(model.lm)
        model.lm.save_pretrained(directory, state_dict=merged)
        with_umask_permissions(directory / ADAPTER_DIR)
    else:
        model.lm.save_pretrained(directory)
    model.tokenizer.save_pretrained(directory)
    with_umask_permissions(directory)
