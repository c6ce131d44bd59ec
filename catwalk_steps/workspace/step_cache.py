"""Cached results that cannot be read (a disk filled up, a copy cut short, a file replaced):
one line naming the step's directory and the command that clears it
(:mod:`catwalk_steps.commands.clear_step`); a result the disk has no room for: one line naming
the file, and nothing of it kept.

The workspace reads cached results through :class:`CheckedStepCache`: whatever goes wrong while
a result is read becomes that line, and a result whose recorded format is not its step's own
data format (someone replaced `cache-metadata.json` to make a JSON step's result be read as a
pickle) is refused instead of being unpickled.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from tango.step import Step
from tango.step_caches import LocalStepCache
from tango.step_info import StepInfo

from ..errors import first_line, one_line_error
from ..files import DiskFullError, disk_full, no_room
from .held_model import HeldModel

# Tango's formats that read plain data. (Its "dill" format unpickles; its "json" format imports
# and calls whatever a file names under "_dataclass".)
DATA_FORMATS = ("text",)


@one_line_error
class DamagedResultError(RuntimeError):
    """A cached step result that cannot be read; the message names it and how to clear it."""


def damaged(directory: Path, error: BaseException) -> DamagedResultError:
    return DamagedResultError(
        f"{directory}: this cached step result cannot be read ({first_line(error)}); clear it "
        f"with `catwalk-clear-step {directory}` and run again to recompute it"
    )


def full_result(
    step: Step, location: Path, written: list[Path], error: BaseException
) -> DiskFullError:
    """The line for a result the disk had no room for, once what it wrote is removed: the file
    the error names, else the last one written."""
    if isinstance(error, DiskFullError):
        line = str(error)
    else:
        named = getattr(error, "filename", None)
        files = [p for p in written if p.is_file()] or written
        newest = max(files, key=lambda p: p.stat().st_mtime_ns, default=location)
        line = str(disk_full(Path(named) if named else newest, "nothing of it was kept"))
    for path in written:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return DiskFullError(f"{line}; step '{step.name}' has no result (what it wrote is removed)")


class CheckedStepCache(LocalStepCache):
    """Tango's local step cache, with one-line errors for damaged results (see the module), and
    models held as the process's one loaded model (:attr:`held`,
    :mod:`catwalk_steps.workspace.held_model`)."""

    def __init__(self, dir: Path | str) -> None:
        super().__init__(dir)
        self.held = HeldModel()  # the workspace's steps load and release through it

    # Tango 1.3.2's in-memory caches (`_add_to_cache`, `_get_from_cache`, private) keep the last
    # eight results read or written, models too: a suite of trained models held them all. A
    # model goes to the one-model holder instead, which releases it when another is loaded.

    def _add_to_cache(self, key: str, o: Any) -> None:
        if isinstance(o, torch.nn.Module):
            self.held.keep(key, o)
            return
        super()._add_to_cache(key, o)

    def _get_from_cache(self, key: str) -> Any:
        held = self.held.get(key)
        return held if held is not None else super()._get_from_cache(key)

    def __setitem__(self, step: Step, value: Any) -> None:
        """Tango's write (its metadata last: a result without it is never read), and a full
        disk in one line naming the file, what the write left removed (the step's work
        directory, which holds its checkpoints, stays)."""
        location = self.step_dir(step)
        before = set(location.iterdir()) if location.is_dir() else set()
        try:
            super().__setitem__(step, value)
        except Exception as e:
            if not no_room(e, location):
                raise
            written = [p for p in location.iterdir() if p not in before]
            raise full_result(step, location, written, e) from None

    def __getitem__(self, step: Step | StepInfo) -> Any:
        directory = self.step_dir(step)
        try:
            self._check_format(step, directory)
            return super().__getitem__(step)
        except (KeyError, DamagedResultError):
            raise
        except Exception as e:  # JSON, safetensors, dill, a missing file: the result is damaged
            # Its own line names the result and how to clear it, also where the cause is one of
            # ours (a weight file cut short: DamagedModelError); the cause is in the message.
            raise damaged(directory, e) from None

    def _check_format(self, step: Step | StepInfo, directory: Path) -> None:
        """A result of one of our steps is read only with a data format (never a pickle)."""
        import json

        own = getattr(step, "format", None) if isinstance(step, Step) else None
        if own is None or not type(step).__module__.startswith("catwalk_steps"):
            return
        # Private: Tango 1.3.2's LocalStepCache knows where a result's cache-metadata.json is and
        # offers no public way to read the format it names before it unpickles the result.
        path = self._metadata_path(step)
        if not path.exists():
            return
        recorded = json.loads(path.read_text()).get("format", {}).get("type")
        ours = str(recorded).startswith(("catwalk::", "catwalk_steps."))
        if recorded not in DATA_FORMATS and not ours:
            raise ValueError(
                f"its metadata names the format {recorded!r}, which is not a data format of "
                "catwalk_steps' results; it is not read"
            )


def held_by(workspace: Any) -> HeldModel:
    """The holder of the model a step of `workspace` scores or releases: its step cache's. A
    workspace of another kind (Tango's own, in Python) has none to share: each call gets a new
    one, so each load there is its own."""
    cache = workspace.step_cache
    return cache.held if isinstance(cache, CheckedStepCache) else HeldModel()
