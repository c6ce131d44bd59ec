"""A trained adapter as a peft adapter directory: `adapter_config.json` and
`adapter_model.safetensors`, as `PeftModel.save_pretrained` writes them, so that
`PeftModel.from_pretrained(base, directory)` (and every tool that reads peft adapters) loads it.

peft's own functions name the weights (`get_peft_model_state_dict`) and write the config; the
files are written here because the model holds its adapters injected in place, not inside a
`PeftModel` (whose names carry the `base_model.model.` prefix that the file keeps).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from .base import ADAPTER_NAME

ADAPTER_DIR = "adapter"  # in a trained model's directory, beside the merged weights
WEIGHTS_FILE = "adapter_model.safetensors"
PREFIX = "base_model.model."  # a PeftModel's name for the model it wraps


def write_adapter_directory(lm: torch.nn.Module, directory: Path, base_model: str | None) -> None:
    """Writes `lm`'s adapter (before any merge) into `directory`.

    :param base_model: the base's hub name or path (`base_model_name_or_path`), or None for a
        model built from a config: then the base is whatever the loader passes in.
    """
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # As PeftModel.save_pretrained: the saved adapter is for inference unless trained further.
    configs: Any = lm.peft_config  # peft's, by adapter name (set by inject_adapter_in_model)
    config = copy.copy(configs[ADAPTER_NAME])
    config.base_model_name_or_path = base_model
    config.inference_mode = True
    state = get_peft_model_state_dict(lm, adapter_name=ADAPTER_NAME)
    tensors = {PREFIX + name: tensor.detach().contiguous().cpu() for name, tensor in state.items()}
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    config.save_pretrained(str(directory))
