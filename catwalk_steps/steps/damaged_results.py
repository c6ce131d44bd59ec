"""Cached results that cannot be read (a disk filled up, a copy cut short), and the command that
clears one so the next run computes it again:

    catwalk-clear-step STEP_DIR     # forget one step's cached result, so the next run recomputes it
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tango.common.exceptions import ConfigurationError

from ..errors import command_line, first_line, one_line_error
from .workspace import SharedLocalWorkspace


@one_line_error
class DamagedResultError(RuntimeError):
    """A cached step result that cannot be read; the message names it and how to clear it."""


def damaged(directory: Path, error: BaseException) -> DamagedResultError:
    return DamagedResultError(
        f"{directory}: this cached step result cannot be read ({first_line(error)}); clear it "
        f"with `catwalk-clear-step {directory}` and run again to recompute it"
    )


def clear_step(step_dir: Path) -> str:
    """Removes one step's cached result and its record from the workspace that holds it."""
    step_dir = Path(step_dir).resolve()
    if step_dir.parent.name != "cache":
        raise ConfigurationError(
            f"{step_dir}: not a step's directory in a workspace (<workspace>/cache/<step id>)"
        )
    workspace = SharedLocalWorkspace(step_dir.parent.parent)
    try:
        workspace.remove_step(step_dir.name)
    except KeyError:
        raise ConfigurationError(f"{step_dir}: the workspace has no such step") from None
    return step_dir.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="catwalk-clear-step",
        description="Forget one step's cached result; the next `tango run` computes it again.",
    )
    parser.add_argument("step_dir", type=Path, help="<workspace>/cache/<step id>")
    args = parser.parse_args(argv)

    def clear() -> str:
        return f"cleared {clear_step(args.step_dir)}; the next run recomputes it"

    return command_line("catwalk-clear-step", clear, ConfigurationError)


if __name__ == "__main__":
    sys.exit(main())
