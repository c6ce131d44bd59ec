"""Any checkpoint as a Hugging Face `save_pretrained` directory, to evaluate or share it.

    catwalk-export CHECKPOINT OUT_DIR

CHECKPOINT is a checkpoint directory (`.../checkpoints/step000000400`), a step's work directory
or its `checkpoints/` directory (then the latest complete checkpoint). Training writes the
model's config and tokenizer beside its checkpoints when it starts, so exporting needs neither
the hub nor the experiment file. The step `catwalk::export_checkpoint` does the same inside a
pipeline, so that `catwalk::evaluate` can score any checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..errors import command_line
from ..files import unwritable
from ..scoring.rank_classifier import RankClassifier
from ..training.checkpoints import (
    CheckpointError,
    model_from_checkpoint,
    read_manifest,
    resolve_checkpoint,
)
from .formats import HFModelFormat


@Step.register("catwalk::export_checkpoint")
class ExportCheckpoint(Step[RankClassifier]):
    """A training checkpoint (intermediate or final) as a rank classifier, stored as a Hugging
    Face directory like `catwalk::train`'s result, so `catwalk::evaluate` can score it.

    :param checkpoint: a checkpoint directory (`.../checkpoints/step000000400`), or a step's work
        directory (its latest complete checkpoint). The same as `catwalk-export CHECKPOINT DIR`.

    The cache key includes the checkpoint's manifest, so a newer checkpoint at the same path is
    exported again.
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = HFModelFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(kwargs)
        with contextlib.suppress(Exception):  # a bad path fails in run(), with its message
            resolved = resolve_checkpoint(Path(kwargs["checkpoint"]))
            kwargs["manifest"] = json.dumps(read_manifest(resolved), sort_keys=True)
        return kwargs

    def run(self, checkpoint: str, manifest: str | None = None) -> RankClassifier:  # type: ignore[override]
        try:
            return model_from_checkpoint(resolve_checkpoint(Path(checkpoint)))
        except CheckpointError as e:
            raise ConfigurationError(f"export_checkpoint.checkpoint: {e}") from None


def export_checkpoint(checkpoint: Path, out_dir: Path, force: bool = False) -> Path:
    """Writes the checkpoint's model as a `save_pretrained` directory; returns its path. A
    directory that holds anything already is refused unless `force` (files would mix)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigurationError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise ConfigurationError(
            f"{out_dir}: not empty; export into a new or empty directory, or give --force to "
            "write over what is there"
        )
    problem = unwritable(out_dir)
    if problem:
        raise ConfigurationError(f"{out_dir}: cannot be written ({problem})")
    model = model_from_checkpoint(resolve_checkpoint(Path(checkpoint)))
    out_dir.mkdir(parents=True, exist_ok=True)
    HFModelFormat().write(model, out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="catwalk-export", description="A checkpoint as a Hugging Face directory."
    )
    parser.add_argument("checkpoint", type=Path, help="checkpoint, or a step's work directory")
    parser.add_argument("out_dir", type=Path, help="where to write the save_pretrained files")
    parser.add_argument("--force", action="store_true", help="write into a non-empty out_dir")
    args = parser.parse_args(argv)

    def export() -> str:
        written = export_checkpoint(args.checkpoint, args.out_dir, force=args.force)
        return f"{written}: from_pretrained loads it"

    return command_line("catwalk-export", export)


if __name__ == "__main__":
    sys.exit(main())
