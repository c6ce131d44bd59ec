"""Full model weights: loading them strictly, and the Hugging Face directory a run produces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from tango.common.aliases import PathOrStr
from tango.format import Format

from .models import RankClassifier

MODEL_INFO_FILE = "catwalk_model.json"


def tied_parameter_names(module: torch.nn.Module) -> set[str]:
    """State-dict names that share storage with an earlier name (e.g. GPT-2's lm_head/wte)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        pointer = tensor.data_ptr()
        if pointer in seen and tensor.numel() > 0:
            tied.add(name)
        else:
            seen.setdefault(pointer, name)
    return tied


def load_full_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Loads a consolidated state dict, failing on any name that does not match.

    Only tied duplicates may be missing: they come back through the weight they share.
    """
    expected = set(model.state_dict())
    missing = expected - set(state) - tied_parameter_names(model)
    unexpected = set(state) - expected
    if missing or unexpected:
        raise RuntimeError(
            f"{source}: weights do not fit the model "
            f"(missing: {sorted(missing)[:5]}, unexpected: {sorted(unexpected)[:5]})"
        )
    model.load_state_dict(state, strict=False)


@Format.register("catwalk::hf_model")
class HFModelFormat(Format[RankClassifier]):
    """Stores a :class:`RankClassifier` as a Hugging Face `save_pretrained` directory.

    The step's result directory loads with `AutoModelForCausalLM.from_pretrained` and
    `AutoTokenizer.from_pretrained` outside Tango. `catwalk_model.json` beside the weights keeps
    the objective and the run's metric history (training loss, validation metrics).
    """

    VERSION = "001"

    def write(self, artifact: RankClassifier, dir: PathOrStr) -> None:
        directory = Path(dir)
        artifact.save_pretrained(directory)
        info: dict[str, Any] = {
            "objective": artifact.objective,
            "metrics_history": getattr(artifact, "metrics_history", None),
        }
        (directory / MODEL_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")

    def read(self, dir: PathOrStr) -> RankClassifier:
        directory = Path(dir)
        info = json.loads((directory / MODEL_INFO_FILE).read_text())
        model = RankClassifier.from_directory(directory, objective=info["objective"])
        model.metrics_history = info["metrics_history"]
        return model
