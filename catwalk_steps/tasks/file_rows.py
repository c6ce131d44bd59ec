"""A data file's rows one at a time, each with the line it starts on: how `source: 'files'`
reads JSON lines, Parquet and `datasets.save_to_disk` directories, so that a file of a million
rows is never whole in memory (the load step writes each row to its stored form as it comes,
:mod:`catwalk_steps.kinds.storing`). A bad row is one line naming the file and line.

CSV is the exception: its columns are typed as `datasets` types them, by pandas' inference over
the whole file (an integer column with one blank is floats), so a CSV file is read whole, once,
by the step that loads it.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from ..errors import first_line
from .base import TaskDataError
from .reading import MAX_LINE_BYTES, TOO_LONG, iter_jsonl

BATCH_ROWS = 1024  # rows of a Parquet file or a datasets directory decoded at a time

Numbered = tuple[int | None, dict[str, Any]]  # (the line a row starts on, or None; the row)
Row = tuple[dict[str, Any], str]  # a row, and where it is (`file:line`) for messages


def located_rows(path: Path, limit: int | None = None) -> Iterator[Row]:
    """Each row of `path` (its first `limit`) with where it is, as a message names it: its
    `file:line`, or `file row N` where the file has no lines (Parquet, a directory)."""
    for index, (line, row) in enumerate(file_rows(path, limit)):
        yield row, (f"{path}:{line}" if line is not None else f"{path} row {index}")


def file_rows(path: Path, limit: int | None = None) -> Iterator[Numbered]:
    """Each row of `path` in order (only the first `limit` when given), with the line it starts
    on (None for Parquet and `datasets` directories, which have no lines)."""
    rows = all_file_rows(path)
    return islice(rows, limit) if limit is not None else rows


def all_file_rows(path: Path) -> Iterator[Numbered]:
    if path.is_dir():
        return dataset_rows(path)
    if path.suffix == ".csv":
        return csv_rows(path)
    if path.suffix == ".parquet":
        return parquet_rows(path)
    return jsonl_rows(path)


def jsonl_rows(path: Path) -> Iterator[Numbered]:
    for number, row in iter_jsonl(path):
        if row is TOO_LONG:
            raise TaskDataError(f"{path}:{number}: longer than {MAX_LINE_BYTES} bytes")
        if not isinstance(row, dict):
            raise TaskDataError(f"{path}:{number}: expected a JSON object")
        yield number, row


def parquet_rows(path: Path) -> Iterator[Numbered]:
    import pyarrow.parquet

    for batch in pyarrow.parquet.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
        for row in batch.to_pylist():
            yield None, row


def dataset_rows(path: Path) -> Iterator[Numbered]:
    """A `datasets.save_to_disk` directory's rows: its Arrow files are memory-mapped, and rows
    are decoded a batch at a time."""
    import datasets

    return table_rows(datasets.load_from_disk(str(path)))


def table_rows(loaded: Any, limit: int | None = None) -> Iterator[Numbered]:
    """A `datasets.Dataset`'s rows (its first `limit`), decoded a batch at a time."""
    end = len(loaded) if limit is None else min(limit, len(loaded))
    for start in range(0, end, BATCH_ROWS):
        for row in loaded.select(range(start, min(start + BATCH_ROWS, end))).to_list():
            yield None, row


def csv_rows(path: Path) -> Iterator[Numbered]:
    rows = read_csv(path)
    lines = csv_record_lines(path)[: len(rows)]
    yield from zip(lines, rows, strict=True)


def read_csv(path: Path) -> list[dict[str, Any]]:
    """A CSV file's rows as `datasets.load_dataset("csv", ...)` gives them: pandas' `read_csv`
    (its type inference; blank lines skipped), converted through Arrow (a missing value is
    None); without the dataset cache `datasets` would write."""
    import pandas
    import pyarrow

    try:
        frame = pandas.read_csv(path)
    except (ValueError, UnicodeDecodeError) as e:
        raise TaskDataError(f"{path}: not a CSV file pandas can read ({first_line(e)})") from None
    return pyarrow.Table.from_pandas(frame, preserve_index=False).to_pylist()


def csv_record_lines(path: Path) -> list[int]:
    """The line (1-based, the header is line 1) on which each record of a CSV file starts,
    blank lines skipped as pandas skips them; a quoted field may span lines."""
    starts = []
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f)
        next(reader, None)
        previous = reader.line_num
        for record in reader:
            if record:
                starts.append(previous + 1)
            previous = reader.line_num
    return starts
