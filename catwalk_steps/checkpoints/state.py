"""Reading a checkpoint's files as data, and the random generators every rank saves in it.

Every file is read with `torch.load(weights_only=True)`: tensors, numbers, strings and
containers, never an arbitrary pickled object, so a planted file cannot run code. What we save
is made of those only (NumPy's generator state goes in as a tensor, not an array).
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import IO, Any, cast

import torch

from ..errors import first_line, refusal_reason
from .layout import CheckpointError


def load_file(path: Path, map_location: str | torch.device = "cpu") -> Any:
    """A checkpoint file's content; a damaged file, or one holding anything but data, is a
    CheckpointError naming it."""
    return load_data(path, str(path), map_location)


def load_data(source: Path | IO[bytes], where: str, map_location: Any = "cpu") -> Any:
    """What `source` (a file, or a stream such as one entry of a DCP checkpoint) holds, read
    as data; a CheckpointError starting with `where` (its file, and entry) if it cannot be."""
    try:
        return torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{where}: holds something other than tensors and plain data, which is not loaded "
            f"({refusal_reason(e)})"
        ) from None
    except (OSError, RuntimeError, EOFError, ValueError, TypeError) as e:
        raise CheckpointError(f"{where}: cannot be read ({first_line(e)})") from None


def rng_state(device: torch.device) -> dict[str, Any]:
    """Python's, NumPy's, torch's CPU generator and the worker's CUDA generator, as data."""
    import numpy as np

    legacy = cast(tuple[str, Any, int, int, float], np.random.get_state())  # MT19937's tuple
    name, keys, position, has_gauss, cached_gaussian = legacy
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict[str, Any], device: torch.device) -> None:
    import numpy as np

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    saved = state["numpy"]
    np.random.set_state(
        (
            saved["name"],
            saved["keys"].numpy().astype(np.uint32),
            saved["position"],
            saved["has_gauss"],
            saved["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
