"""How step results are stored: a trained rank classifier as a Hugging Face directory."""

from __future__ import annotations

from pathlib import Path

from tango.common.aliases import PathOrStr
from tango.format import Format

from ..scoring.rank_classifier import RankClassifier
from ..training.checkpoints.weights import read_model_info, write_model_info
from .damaged_results import damaged


@Format.register("catwalk::hf_model")
class HFModelFormat(Format[RankClassifier]):
    """Stores a :class:`RankClassifier` as a Hugging Face `save_pretrained` directory.

    The step's result directory loads with `AutoModelForCausalLM.from_pretrained` and
    `AutoTokenizer.from_pretrained` outside Tango. `catwalk_model.json` beside the weights keeps
    the objective, the run's metric history (training loss, learning rate, throughput, memory,
    validation metrics) and its run card (config, versions, git commit, host, wall time).
    """

    VERSION = "001"

    def write(self, artifact: RankClassifier, dir: PathOrStr) -> None:
        directory = Path(dir)
        artifact.save_pretrained(directory)
        write_model_info(directory, artifact.objective, artifact.metrics_history, artifact.run_card)

    def read(self, dir: PathOrStr) -> RankClassifier:
        directory = Path(dir)
        try:
            info = read_model_info(directory)
            model = RankClassifier.from_directory(directory, objective=info["objective"])
        except Exception as e:  # safetensors, JSON, a missing file: the result is damaged
            raise damaged(directory, e) from e
        model.metrics_history = info["metrics_history"]
        model.run_card = info.get("run_card")  # absent in models trained before run cards
        return model
