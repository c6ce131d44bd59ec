"""`catwalk-export`: any checkpoint as a Hugging Face `save_pretrained` directory, to evaluate or
share it.

    catwalk-export CHECKPOINT OUT_DIR [--force]

CHECKPOINT is a checkpoint directory (`.../checkpoints/step000000400`), a step's work directory
or its `checkpoints/` directory (then the latest complete checkpoint). OUT_DIR is new or empty
(`--force` writes into one that is not).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tango.common.exceptions import ConfigurationError

from ..checkpoints import model_from_checkpoint, resolve_checkpoint
from ..errors import command_line
from ..files import unwritable
from ..workspace.formats import HFModelFormat


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
