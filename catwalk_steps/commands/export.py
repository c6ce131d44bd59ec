"""`catwalk-export`: any checkpoint as a Hugging Face `save_pretrained` directory, to evaluate or
share it.

    catwalk-export CHECKPOINT OUT_DIR [--force] [--adapter]

CHECKPOINT is a checkpoint directory (`.../checkpoints/step000000400`), the `latest` or `best`
pointer beside it (the checkpoint it names), a step's work directory or its `checkpoints/`
directory (then the latest complete checkpoint). OUT_DIR is new or empty
(`--force` writes into one that is not). A checkpoint of an adapter run is exported as the
trained step's result is: the merged model, with the peft adapter directory in `adapter/`; with
`--adapter`, the peft adapter directory alone (the base is rebuilt from its source either way).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tango.common.exceptions import ConfigurationError

from ..checkpoints import model_from_checkpoint, resolve_checkpoint
from ..checkpoints.layout import MODEL_FILES, MODEL_INFO
from ..checkpoints.weights import read_model_info
from ..errors import command_line
from ..files import unwritable
from ..workspace.formats import HFModelFormat


def export_checkpoint(
    checkpoint: Path, out_dir: Path, force: bool = False, adapter: bool = False
) -> Path:
    """Writes the checkpoint's model as a `save_pretrained` directory (with `adapter`, its peft
    adapter directory); returns its path. A directory that holds anything already is refused
    unless `force` (files would mix)."""
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
    resolved = resolve_checkpoint(Path(checkpoint))
    if adapter and not adapter_run(resolved):
        raise ConfigurationError(
            f"{resolved}: --adapter, but this run trained the whole model (no adapter to export)"
        )
    model = model_from_checkpoint(resolved)
    out_dir.mkdir(parents=True, exist_ok=True)
    if adapter:
        model.save_pretrained(out_dir, adapter_only=True)
    else:
        HFModelFormat().write(model, out_dir)
    return out_dir


def adapter_run(checkpoint: Path) -> bool:
    """Whether the checkpoint's run trained an adapter (its model files say; read as JSON)."""
    files = checkpoint.parent / MODEL_FILES
    return (files / MODEL_INFO).is_file() and read_model_info(files).get("adapter") is not None


def parser() -> argparse.ArgumentParser:
    """The command's arguments (docs/reference/cli.md is generated from them)."""
    parser = argparse.ArgumentParser(
        prog="catwalk-export",
        description="Any checkpoint of a catwalk::train run as a Hugging Face save_pretrained "
        "directory, to evaluate or share it. An adapter run's is exported merged, with its "
        "peft adapter directory in adapter/ (--adapter: that directory alone).",
    )
    parser.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        type=Path,
        help="a checkpoint directory (.../checkpoints/step000000400), the latest or best "
        "pointer beside it, or a step's work directory or its checkpoints/ directory (then "
        "its latest complete checkpoint)",
    )
    parser.add_argument(
        "out_dir",
        metavar="OUT_DIR",
        type=Path,
        help="where to write the save_pretrained files: a new or empty directory",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into an OUT_DIR that is not empty, over what is there (default: refused)",
    )
    parser.add_argument(
        "--adapter",
        action="store_true",
        help="an adapter run's peft adapter directory alone (default: the merged model)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def export() -> str:
        written = export_checkpoint(
            args.checkpoint, args.out_dir, force=args.force, adapter=args.adapter
        )
        if args.adapter:
            return f"{written}: PeftModel.from_pretrained(base, '{written}') loads it"
        return f"{written}: from_pretrained loads it"

    return command_line("catwalk-export", export)


if __name__ == "__main__":
    sys.exit(main())
