"""The workspace's step records (`stepinfo.sqlite`) stored as data: JSON, never a pickle.

Tango 1.3.2's `LocalWorkspace` keeps each step's record (`StepInfo`: state, times, config,
environment) in a `SqliteDict`, whose values are pickles: a record planted in a shared
workspace ran code in the next `tango run` that read it (2026-12-01). A workspace is shared
between jobs and users like a checkpoint is, so its records are written here as JSON
(`StepInfo.to_json_dict`, times to the microsecond), and read as JSON.

A database written by an older catwalk_steps or by stock Tango holds pickles. Those are read by
a restricted unpickler that builds only what a step record is made of (the `StepInfo`
dataclasses, `datetime`, pytz's UTC, paths, sets) and refuses anything else in one line naming
the file: no function is ever called, no module imported. A record read that way is written
back as JSON the next time it changes.

Tango opens the database in a dozen places of `LocalWorkspace` (registering runs, looking up
steps, listing them); its module's `SqliteDict` is bound to :class:`StepRecords` once, so every
one of them reads and writes data (:mod:`catwalk_startup.patching`, version-checked).
"""

from __future__ import annotations

import io
import json
import pickle
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlitedict import SqliteDict
from tango.step_info import StepInfo

from ..errors import first_line, one_line_error

TIMES = ("start_time", "end_time")
# What a pickled StepInfo is made of (Tango 1.3.2, SqliteDict's protocol 5), and nothing else.
ALLOWED_GLOBALS = {
    ("tango.step_info", name)
    for name in (
        "StepInfo",
        "StepState",
        "PlatformMetadata",
        "EnvironmentMetadata",
        "GitMetadata",
        "TangoMetadata",
    )
} | {
    ("datetime", "datetime"),
    ("datetime", "timezone"),
    ("datetime", "timedelta"),
    ("pytz", "_UTC"),
    ("pytz", "utc"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "Path"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


@one_line_error
class DamagedRecordsError(RuntimeError):
    """A step record that is not step information; the message names the database."""


def encode_record(info: StepInfo) -> str:
    data = info.to_json_dict()
    for key in TIMES:  # Tango's own form keeps whole seconds only
        value = getattr(info, key)
        data[key] = value.isoformat() if value is not None else None
    return json.dumps(data)


def decode_record(path: Path, value: Any) -> StepInfo:
    if isinstance(value, str):
        try:
            data = json.loads(value)
            times = {key: data.pop(key, None) for key in TIMES}
            environment = data.get("environment")
            packages = environment.pop("packages", None) if isinstance(environment, dict) else None
            info = StepInfo.from_json_dict(data)
            for key, text in times.items():
                setattr(info, key, datetime.fromisoformat(text) if text else None)
            if packages is not None:
                info.environment.packages = package_list(packages)
            return info
        except Exception as e:
            raise damaged(path, f"a record is not a step's JSON ({first_line(e)})") from None
    info = RecordUnpickler(path, io.BytesIO(bytes(value))).load()
    if not isinstance(info, StepInfo):
        raise damaged(path, f"a record holds a {type(info).__name__}, not a step's record")
    return info


def package_list(value: Any) -> list[tuple[str, str]]:
    """A record's installed packages, `[[name, version], ...]`, as Tango's field holds them
    (tuples); read here, not by Tango's `from_params`, which took 16 of a record's 17 ms for
    its ~150 pairs, and a run reads dozens of records."""
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in value
    ):
        raise ValueError("environment.packages: expected a list of [name, version] pairs")
    return [(name, version) for name, version in value]


class RecordUnpickler(pickle.Unpickler):
    """Reads a pickled step record of an older workspace, building only what one is made of."""

    def __init__(self, path: Path, file: io.BytesIO):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise damaged(
                self.path,
                f"a record is a pickle that names {module}.{name}, which is not part of a step's "
                "record; nothing of it was run",
            )
        return super().find_class(module, name)

    def load(self) -> Any:
        try:
            return super().load()
        except DamagedRecordsError:
            raise
        except Exception as e:
            raise damaged(self.path, f"a record cannot be read ({first_line(e)})") from None


def damaged(path: Path, what: str) -> DamagedRecordsError:
    return DamagedRecordsError(
        f"{path}: {what}; this workspace's step records are not trusted. Move the file away "
        "(the cached results stay, and their records are made again) or use another workspace"
    )


class StepRecords(SqliteDict):
    """Tango's record database with values as JSON (see the module)."""

    def __init__(self, filename: Any = None, *args: Any, **kwargs: Any):
        path = Path(filename) if filename is not None else Path("stepinfo.sqlite")
        kwargs.setdefault("encode", encode_record)
        kwargs.setdefault("decode", lambda value: decode_record(path, value))
        super().__init__(filename, *args, **kwargs)
