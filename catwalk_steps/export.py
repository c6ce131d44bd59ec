"""Any checkpoint as a Hugging Face `save_pretrained` directory, to evaluate or share it.

    python -m catwalk_steps.export CHECKPOINT OUT_DIR     # or: catwalk-export CHECKPOINT OUT_DIR

CHECKPOINT is a checkpoint directory (`.../checkpoints/step000000400`), a step's work directory
or its `checkpoints/` directory (then the latest complete checkpoint). Training writes the
model's config and tokenizer beside its checkpoints (`checkpoints/model_files/`) when it starts,
so exporting needs neither the hub nor the experiment file. The same function serves the
`catwalk::export_checkpoint` step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from .checkpoints import (
    LATEST,
    TRAINER_FILE,
    CheckpointError,
    checkpoints_root,
    complete_checkpoints,
    full_model_state,
    load_file,
    pointed,
    problem_with,
)
from .errors import command_line
from .files import write_json_atomic
from .models import RankClassifier

MODEL_FILES = "model_files"
MODEL_INFO = "catwalk_model.json"


def write_model_files(model: torch.nn.Module, work_dir: Path) -> None:
    """The rank classifier's config, tokenizer and objective, beside the checkpoints (rank 0)."""
    classifier = next((m for m in model.modules() if isinstance(m, RankClassifier)), None)
    if classifier is None:
        return  # not a rank classifier: checkpoints still resume, export is not offered
    directory = checkpoints_root(work_dir) / MODEL_FILES
    directory.mkdir(parents=True, exist_ok=True)
    classifier.lm.config.save_pretrained(directory)
    classifier.tokenizer.save_pretrained(directory)
    write_json_atomic(directory / MODEL_INFO, {"objective": classifier.objective})


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint directory from what the user names; the latest one of a work directory."""
    path = Path(path)
    if (path / "COMPLETE.json").is_file() or path.name.startswith("step"):
        problem = problem_with(path)
        if problem:
            raise CheckpointError(problem)
        return path
    work_dir = path.parent if path.name == "checkpoints" else path
    latest = pointed(work_dir, LATEST)
    candidates = ([latest] if latest else []) + complete_checkpoints(work_dir)
    for candidate in candidates:
        if problem_with(candidate) is None:
            return candidate
    raise CheckpointError(
        f"{path}: no complete checkpoint (a step's work directory, or one of "
        "its checkpoints/stepNNNNNNNNN directories)"
    )


def checkpoint_model(checkpoint: Path) -> RankClassifier:
    """The rank classifier with the checkpoint's weights (strictly: every weight must fit)."""
    from .checkpoints import check_full_weights

    checkpoint = resolve_checkpoint(checkpoint)
    files = checkpoint.parent / MODEL_FILES
    if not (files / "config.json").is_file():
        raise CheckpointError(
            f"{files}: missing (written when training starts; not a rank classifier's checkpoint?)"
        )
    info = json.loads((files / MODEL_INFO).read_text())
    model = RankClassifier(pretrained=str(files), objective=info["objective"], skeleton=True)
    weights = full_model_state(checkpoint)
    check_full_weights(model, set(weights), str(checkpoint))
    model.load_state_dict(weights, strict=False, assign=True)  # tied duplicates may be absent
    model.lm.tie_weights()
    model.metrics_history = checkpoint_history(checkpoint)
    return model


def checkpoint_history(checkpoint: Path) -> dict[str, Any] | None:
    """The metric history the run had recorded when it wrote this checkpoint."""
    trainer = load_file(checkpoint / TRAINER_FILE)
    for state in trainer["ranks"][0]["callbacks"]:
        if isinstance(state, dict) and "history" in state:
            return state["history"]
    return None


def export_checkpoint(checkpoint: Path, out_dir: Path) -> Path:
    """Writes the checkpoint's model as a `save_pretrained` directory; returns its path."""
    from .formats import HFModelFormat

    model = checkpoint_model(checkpoint)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    HFModelFormat().write(model, out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="catwalk-export", description="A checkpoint as a Hugging Face directory."
    )
    parser.add_argument("checkpoint", type=Path, help="checkpoint, or a step's work directory")
    parser.add_argument("out_dir", type=Path, help="where to write the save_pretrained files")
    args = parser.parse_args(argv)

    def export() -> str:
        return f"{export_checkpoint(args.checkpoint, args.out_dir)}: from_pretrained loads it"

    return command_line("catwalk-export", export, CheckpointError)


if __name__ == "__main__":
    sys.exit(main())
