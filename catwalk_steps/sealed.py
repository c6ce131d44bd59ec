"""Cached files that feed a number, written with their SHA-256 and checked when read.

An evaluation's metrics and per-document records, a task's stored instances (the DPO
reference's log-probabilities among them), a report, an evaluation's saved answers: each is
data that a later run, a report or `catwalk-compare` reads instead of computing it again, so a
file edited after it was written (by hand, by a script, by a damaged disk) would become a
number. Each is written with the SHA-256 of its content, and its reader checks it before
anything is computed from it: a file that differs, or is missing, is refused in one line naming
it (:class:`AlteredFileError`).

One rule, two shapes:

- a step's result directory: its files, then `digests.json` naming each with its SHA-256
  (:func:`write_digests`; read with :func:`read_checked`, :func:`read_if_written`); a file it
  names that is gone is refused too;
- one JSON record written whole at once (an evaluation's chunk of answers: many workers write
  chunks into one directory at once): the record carries `sha256`, the digest of its other keys
  as canonical JSON (:func:`sealed_record`, :func:`unsealed_record`).

A result directory written before results carried digests (no `digests.json`) reads as it
did, and the first one a process reads is said in one line.

A digest catches a change made after the file was written; it is not a signature: whoever may
write the file may write a matching digest beside it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import one_line_error
from .files import write_json_atomic

DIGESTS = "digests.json"
RECORD_KEY = "sha256"  # a sealed record's digest

logger = logging.getLogger(__name__)
_said_unchecked: list[Path] = []  # results without digests read by this process (said once)


@one_line_error
class AlteredFileError(ValueError):
    """A cached file whose content is not what was written (the message names the file)."""


def sha256_of_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_digests(directory: Path, names: Iterable[str]) -> None:
    """`digests.json` in `directory`: each named file's SHA-256, read back from the disk as its
    readers will read it. Written last, so a result is whole once it is there."""
    directory = Path(directory)
    digests = {name: sha256_of_bytes((directory / name).read_bytes()) for name in names}
    write_json_atomic(directory / DIGESTS, {"sha256": digests})


def recorded_digests(directory: Path) -> dict[str, str] | None:
    """What `digests.json` says (None where there is none: a result of an older version)."""
    path = Path(directory) / DIGESTS
    if not path.is_file():
        return None
    try:
        digests = json.loads(path.read_bytes())["sha256"]
    except (ValueError, KeyError, TypeError):
        digests = None
    if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
        raise AlteredFileError(f"{path}: not the digests written with the result")
    return digests


def read_checked(path: Path) -> bytes:
    """The file's bytes once they match the SHA-256 its directory's `digests.json` holds (a
    directory without one is read as it is: said once per process)."""
    data = read_if_written(path)
    if data is None:
        raise FileNotFoundError(f"{path}: no such file")
    return data


def read_if_written(path: Path) -> bytes | None:
    """As :func:`read_checked`, for a file a result may not have: None when it does not exist
    and `digests.json` does not name it."""
    path = Path(path)
    digests = recorded_digests(path.parent)
    if digests is None:
        say_unchecked(path.parent)
        return path.read_bytes() if path.is_file() else None
    expected = digests.get(path.name)
    if not path.is_file():
        if expected is None:
            return None
        raise AlteredFileError(
            f"{path}: missing ({DIGESTS} beside it says it was written with the result)"
        )
    data = path.read_bytes()
    if expected is None or sha256_of_bytes(data) != expected:
        raise AlteredFileError(f"{path}: {altered(f'the one {DIGESTS} beside it holds')}")
    return data


def altered(where: str) -> str:
    return f"changed since it was written: its SHA-256 is not {where}"


def say_unchecked(directory: Path) -> None:
    if _said_unchecked:
        return
    _said_unchecked.append(directory)
    logger.warning(
        "%s: written before cached results carried digests, read unchecked (as any other such "
        "result: said once); clear it with `catwalk-clear-step` to compute it again with one",
        directory,
    )


def canonical_digest(value: Any) -> str:
    """SHA-256 of `value` as canonical JSON (keys sorted): the same for the value as written
    and as read back."""
    return sha256_of_bytes(json.dumps(value, sort_keys=True).encode())


def sealed_record(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with its digest (written whole, in one file)."""
    return {**record, RECORD_KEY: canonical_digest(record)}


def unsealed_record(record: Any) -> dict[str, Any]:
    """The record without its digest, once the digest matches; :class:`AlteredFileError`
    (a message without the file, which the caller names) when it does not."""
    if not isinstance(record, dict) or not isinstance(record.get(RECORD_KEY), str):
        raise AlteredFileError("it carries no SHA-256 of its content")
    content = {key: value for key, value in record.items() if key != RECORD_KEY}
    if canonical_digest(content) != record[RECORD_KEY]:
        raise AlteredFileError(altered("the one it carries"))
    return content
