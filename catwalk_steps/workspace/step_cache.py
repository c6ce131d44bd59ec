"""Cached results that cannot be read (a disk filled up, a copy cut short, a file replaced):
one line naming the step's directory and the command that clears it
(:mod:`catwalk_steps.commands.clear_step`).

The workspace reads cached results through :class:`CheckedStepCache`: whatever goes wrong while
a result is read becomes that line, and a result whose recorded format is not its step's own
data format (someone replaced `cache-metadata.json` to make a JSON step's result be read as a
pickle) is refused instead of being unpickled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tango.step import Step
from tango.step_caches import LocalStepCache
from tango.step_info import StepInfo

from ..errors import first_line, one_line_error
from ..standalone.loaded import held_model, keep_model

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


class CheckedStepCache(LocalStepCache):
    """Tango's local step cache, with one-line errors for damaged results (see the module), and
    models held as the process's one loaded model (:mod:`catwalk_steps.standalone.loaded`)."""

    # Tango 1.3.2's in-memory caches (`_add_to_cache`, `_get_from_cache`, private) keep the last
    # eight results read or written, models too: a suite of trained models held them all. A
    # model goes to the one-model holder instead, which releases it when another is loaded.

    def _add_to_cache(self, key: str, o: Any) -> None:
        if isinstance(o, torch.nn.Module):
            keep_model(key, o)
            return
        super()._add_to_cache(key, o)

    def _get_from_cache(self, key: str) -> Any:
        held = held_model(key)
        return held if held is not None else super()._get_from_cache(key)

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
