"""Writing a task's splits in their stored form (:mod:`.stored`), as their instances come: each
split one Arrow file in its kind's columns, written a batch of rows at a time (a split of a
million rows is never whole in memory), with its SHA-256 and its `dataset_fingerprint`, both
computed as it is written.

`catwalk::load_task` returns :class:`StreamedSplits`: the splits as the task reads them, which
the step's format writes; Tango then reads the stored result back (an iterator is never kept as
a result), so what the next step gets is the stored splits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..arrow_tables import write_table
from ..tasks.base import SplitFingerprint
from .base import kind_of

BATCH_ROWS = 4096  # instances turned into a record batch at a time


class StreamedSplits(Iterator[tuple[str, Iterable[Any]]]):
    """A task's splits as it reads them: (name, instances) once each, in order, with the
    result's `metadata`."""

    def __init__(self, splits: Iterable[tuple[str, Iterable[Any]]], metadata: Mapping[str, Any]):
        self.splits = iter(splits)
        self.metadata = dict(metadata)

    def __iter__(self) -> StreamedSplits:
        return self

    def __next__(self) -> tuple[str, Iterable[Any]]:
        return next(self.splits)


def write_split(path: Path, name: str, instances: Iterable[Any]) -> dict[str, Any]:
    """`instances` (of one kind: the first one's) written to `path` as they come, in record
    batches of :data:`BATCH_ROWS`; what the result's record keeps of the split: its file,
    SHA-256, rows, kind, fingerprint, batch size and each column's first null (what training
    asks of a split without reading it: a generative row without an answer)."""
    rest = iter(instances)
    first = next(rest, None)
    kind = kind_of([] if first is None else [first])
    columns, fingerprint = kind.columns, SplitFingerprint(name)
    first_null: dict[str, int] = {}

    def batches() -> Iterator[pa.RecordBatch]:
        rows: list[dict[str, Any]] = []
        for instance in chain([] if first is None else [first], rest):
            row = columns.row(instance)
            for column in [c for c, value in row.items() if value is None]:
                first_null.setdefault(column, fingerprint.count)
            fingerprint.add(instance)
            rows.append(row)
            if len(rows) == BATCH_ROWS:
                yield pa.RecordBatch.from_pylist(rows, schema=columns.schema)
                rows = []
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=columns.schema)

    sha256 = write_table(path, columns.schema, batches())
    return {
        "file": path.name,
        "sha256": sha256,
        "rows": fingerprint.count,
        "kind": kind.name,
        "fingerprint": fingerprint.hexdigest(),
        "batch_rows": BATCH_ROWS,
        "first_null": first_null,
    }
