"""Reading task files line by line, so that bad data fails with one line naming the file, the
line and the field: text that is not UTF-8, invalid JSON, labels that are not numbers, and lines
too long to be a question (skipped, with their labels)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

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


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    return list(json_lines(path))


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line, read as it is reached (a line too long:
    :data:`TOO_LONG`)."""
    for number, line in text_lines(path):
        if line is None:
            yield number, TOO_LONG
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}:{number}: invalid JSON ({e.msg})") from None


def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a JSON lines file of objects, one at a time: a line too long or
    not an object names its file and line."""
    for number, row in json_lines(path):
        if row is TOO_LONG:
            raise TaskDataError(f"{path}:{number}: longer than {MAX_LINE_BYTES} bytes")
        if not isinstance(row, dict):
            raise TaskDataError(f"{path}:{number}: expected a JSON object")
        yield number, row


def read_labels(path: Path) -> list[tuple[int, Any]]:
    labels = []
    for number, line in text_lines(path):
        text = (line or "").strip()
        try:
            labels.append((number, int(text)))
        except ValueError:
            raise TaskDataError(
                f"{path}:{number}: field 'label' must be 0 or 1, got {text[:20]!r}"
            ) from None
    return labels


def fingerprint(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
