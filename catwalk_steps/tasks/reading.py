"""Reading task files line by line, so that bad data fails with one line naming the file, the
line and the field: text that is not UTF-8, invalid JSON, labels that are not numbers, and lines
too long to be a question (skipped, with their labels). A file is read as a stream: one line in
memory at a time, however long the file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..file_digests import file_digests
from .base import TaskDataError

MAX_LINE_BYTES = 1 << 20  # a PIQA row is well under 1 KiB; 1 MiB is not a question
TOO_LONG = object()  # a row skipped for its length (its label is skipped with it)


def text_lines(path: Path) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of the non-blank lines; bytes that are not UTF-8 name the line, and
    a line longer than :data:`MAX_LINE_BYTES` is not decoded (None)."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if len(raw) > MAX_LINE_BYTES:
                yield number, None
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TaskDataError(
                    f"{path}:{number}: not UTF-8 text (byte {raw[e.start]:#04x} at column "
                    f"{e.start + 1}); save the file as UTF-8"
                ) from None
            if text.strip():
                yield number, text


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line, as it is read; :data:`TOO_LONG` for a line
    longer than :data:`MAX_LINE_BYTES`."""
    for number, line in text_lines(path):
        if line is None:
            yield number, TOO_LONG
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}:{number}: invalid JSON ({e.msg})") from None


def iter_labels(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, label) of each non-blank line, as it is read."""
    for number, line in text_lines(path):
        text = (line or "").strip()
        try:
            yield number, int(text)
        except ValueError:
            raise TaskDataError(
                f"{path}:{number}: field 'label' must be 0 or 1, got {text[:20]!r}"
            ) from None


def fingerprint(paths: Iterable[Path]) -> str:
    """What local files are, for a step's identity: each file's name and SHA-256, hashed once
    while it is unchanged (:mod:`catwalk_steps.file_digests`), so a graph build (in `tango run`,
    in each `--parallelism` slot, on each node) reads no file whole once it has been hashed."""
    ordered = sorted(paths)
    digest = hashlib.sha256()
    for path, sha256 in zip(ordered, file_digests(ordered), strict=True):
        digest.update(f"{path.name}\0{sha256}\n".encode())
    return digest.hexdigest()
