"""Imported into a command (`-i tests.no_weights`), every function that reads a model's weights
raises :class:`WeightsRead` from then on: a command that must read none (`catwalk-plan`) shows
it did by finishing.

The functions replaced: `torch.load`, torch.distributed.checkpoint's loads (FSDP2's sharded
checkpoints), safetensors' loads and `safe_open`, transformers' `from_pretrained` of every model
class (the auto classes' too) and peft's. A module that bound one of them by name before this
ran (`from safetensors.torch import load_file`) gets the refusal under that name too.

`python -m tests.no_weights MODEL_DIR` (`read_model`) reads a saved model with this installed:
the control that shows the refusal bites on the path a cached model is read by.
"""

from __future__ import annotations

import sys
from typing import Any

import safetensors
import safetensors.torch
import torch
import torch.distributed.checkpoint as dcp
import transformers
from peft import PeftModel
from transformers.models.auto.auto_factory import _BaseAutoModelClass


class WeightsRead(RuntimeError):
    """A model's weights were about to be read where none may be."""


def refusal(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise WeightsRead(f"{name} called: weights read (tests.no_weights)")

    return refused


FUNCTIONS = {
    (torch, "load"): "torch.load",
    (dcp, "load"): "torch.distributed.checkpoint.load",
    (dcp, "load_state_dict"): "torch.distributed.checkpoint.load_state_dict",
    (safetensors, "safe_open"): "safetensors.safe_open",
    (safetensors.torch, "safe_open"): "safetensors.torch.safe_open",
    (safetensors.torch, "load_file"): "safetensors.torch.load_file",
    (safetensors.torch, "load"): "safetensors.torch.load",
}
CLASSES = {
    transformers.PreTrainedModel: "PreTrainedModel.from_pretrained",
    _BaseAutoModelClass: "AutoModel*.from_pretrained",
    PeftModel: "PeftModel.from_pretrained",
}


def install() -> None:
    replaced: dict[int, tuple[Any, Any]] = {}  # id -> (the original, its refusal)
    for (module, attribute), name in FUNCTIONS.items():
        original = getattr(module, attribute)
        replaced[id(original)] = (original, refusal(name))
        setattr(module, attribute, replaced[id(original)][1])
    for cls, name in CLASSES.items():
        cls.from_pretrained = classmethod(refusal(name))  # type: ignore[method-assign]
    for module in list(sys.modules.values()):  # names bound before this ran
        for attribute, value in list(getattr(module, "__dict__", {}).items()):
            original, refused = replaced.get(id(value), (None, None))
            if original is not None and value is original:
                setattr(module, attribute, refused)


def read_model() -> int:
    """Reads the saved model at argv[1] as a cached model is read; 1 with the refusal."""
    from catwalk_steps.workspace.formats import HFModelFormat

    try:
        HFModelFormat().read(sys.argv[1])
    except WeightsRead as e:
        print(f"WeightsRead: {e}", file=sys.stderr)
        return 1
    return 0


install()

if __name__ == "__main__":
    sys.exit(read_model())
