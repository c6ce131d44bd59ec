"""Reading a checkpoint's files, and the random generators every rank saves in it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from ...errors import first_line
from .layout import CheckpointError


def load_file(path: Path, map_location: str | torch.device = "cpu") -> Any:
    """`torch.load` of a checkpoint file; a damaged file is a CheckpointError naming it."""
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except (OSError, RuntimeError, EOFError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot be read ({first_line(e)})") from None


def rng_state(device: torch.device) -> dict[str, Any]:
    """Python's, NumPy's, torch's CPU generator and the worker's CUDA generator."""
    import numpy as np

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict[str, Any], device: torch.device) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
