"""How step results are stored: a trained rank classifier as a Hugging Face directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tango.common.aliases import PathOrStr
from tango.format import Format

from .models import RankClassifier
from .workspace import damaged

MODEL_INFO_FILE = "catwalk_model.json"


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
            "metrics_history": artifact.metrics_history,
        }
        (directory / MODEL_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")

    def read(self, dir: PathOrStr) -> RankClassifier:
        directory = Path(dir)
        try:
            info = json.loads((directory / MODEL_INFO_FILE).read_text())
            model = RankClassifier.from_directory(directory, objective=info["objective"])
        except Exception as e:  # safetensors, JSON, a missing file: the result is damaged
            raise damaged(directory, e) from e
        model.metrics_history = info["metrics_history"]
        return model
