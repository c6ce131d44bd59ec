"""`catwalk-clear-step`: forget one step's cached result, so that the next run computes it again.

catwalk-clear-step STEP_DIR     # <workspace>/cache/<step id>
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tango.common.exceptions import ConfigurationError

from ..errors import command_line
from ..workspace.shared import SharedLocalWorkspace


def clear_step(step_dir: Path) -> str:
    """Removes one step's cached result and its record from the workspace that holds it."""
    step_dir = Path(step_dir).resolve()
    root = step_dir.parent.parent
    if step_dir.parent.name != "cache" or not is_workspace(root):
        raise ConfigurationError(
            f"{step_dir}: not a step's directory in a workspace (<workspace>/cache/<step id>); "
            "nothing was changed"
        )
    if not step_dir.is_dir():
        raise ConfigurationError(f"{step_dir}: no such step directory; nothing was changed")
    workspace = SharedLocalWorkspace(root)
    try:
        workspace.remove_step(step_dir.name)
    except KeyError:
        raise ConfigurationError(f"{step_dir}: the workspace has no such step") from None
    return step_dir.name


def is_workspace(directory: Path) -> bool:
    """A local Tango workspace: its cache and its step records (nothing is created to tell)."""
    records = (directory / "settings.json", directory / "stepinfo.sqlite")
    return (directory / "cache").is_dir() and any(path.is_file() for path in records)


def parser() -> argparse.ArgumentParser:
    """The command's arguments (docs/reference/cli.md is generated from them)."""
    parser = argparse.ArgumentParser(
        prog="catwalk-clear-step",
        description="Forget one step's cached result and its record; the next `tango run` "
        "computes it again. A damaged result's one-line error names the command to type.",
    )
    parser.add_argument(
        "step_dir",
        metavar="STEP_DIR",
        type=Path,
        help="the step's directory in its workspace: <workspace>/cache/<step id>",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def clear() -> str:
        return f"cleared {clear_step(args.step_dir)}; the next run recomputes it"

    return command_line("catwalk-clear-step", clear)


if __name__ == "__main__":
    sys.exit(main())
