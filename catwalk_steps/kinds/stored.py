"""A stored split: a `catwalk::load_task` split kept as one Arrow file, read as a sequence of
instances that its kind decodes one by one when asked (:attr:`~.base.TaskKind.columns`).

Nothing is read when a split is opened but the file's footer: the file is memory-mapped, its
SHA-256 checked once while it is unchanged (:func:`~catwalk_steps.arrow_tables.open_batches`),
and a record batch (a few thousand rows) is mapped when a row of it is asked for: a process
holds no row until it asks for one, and opening a million rows maps a few pages. The processes
that read one split (a run's ranks, its `--parallelism` slots, a sweep's cells) share its pages
through the page cache.

A split sent to another process (a training job pickled to its workers) carries its path,
digest, kind and size, never its rows: the worker maps the same file. Slicing gives a view of
the same file (`split[:1]` reads one row); :meth:`StoredSplit.replaced` a view whose instances
have some fields set (a generative split as training reads it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, overload

import pyarrow as pa

from ..arrow_tables import open_batches
from ..file_digests import stat_key
from ..tasks.base import dataset_fingerprint
from .base import KINDS, TaskKind, kind_named

READ_ROWS = 1024  # rows decoded at a time when a split is iterated

# This process's opened files, by (path, digest, the file's stat: as file_digests keys them).
_readers: dict[tuple[str, str, tuple[int, ...]] | None, pa.ipc.RecordBatchFileReader] = {}


@dataclass(frozen=True)
class SplitFile:
    """Where a stored split's rows are, and what its record says of them (data, small: what a
    pickled split carries).

    :ivar path: the Arrow file; `sha256` its digest, written with it.
    :ivar kind: the name of its instances' kind; `rows` how many the file holds, in record
        batches of `batch_rows` (the last one fewer).
    :ivar name: the split's name; `fingerprint` its `dataset_fingerprint({name: instances})`,
        computed when it was written.
    :ivar first_null: for each column with a null, the first row that has it.
    """

    path: str
    sha256: str
    kind: str
    rows: int
    batch_rows: int
    name: str = ""
    fingerprint: str | None = None
    first_null: tuple[tuple[str, int], ...] = ()


class StoredSplit(Sequence[Any]):
    """The instances of one stored split (see the module): the rows `window` of `file` (all of
    them when None), each with `fields` set (`(("training", True),)`)."""

    def __init__(
        self,
        file: SplitFile,
        window: range | None = None,
        fields: tuple[tuple[str, Any], ...] = (),
    ):
        self.file, self.fields = file, fields
        self.window = range(file.rows) if window is None else window
        self._reader: pa.ipc.RecordBatchFileReader | None = None  # this process's (unpickled)
        self._batch: tuple[int, pa.RecordBatch] | None = None  # the last one read

    def __reduce__(self) -> tuple[Any, ...]:
        """What another process gets: where the rows are, never the rows."""
        return (type(self), (self.file, self.window, self.fields))

    def __repr__(self) -> str:
        file = self.file
        return f"StoredSplit({file.path!r}, {len(self)} of {file.rows} {file.kind} rows)"

    @property
    def kind(self) -> TaskKind:
        return kind_named(self.file.kind)

    @property
    def fingerprint(self) -> str | None:
        """The split's fingerprint, where this is the split as stored (else None)."""
        whole = self.window == range(self.file.rows) and not self.fields
        return self.file.fingerprint if whole else None

    def reader(self) -> pa.ipc.RecordBatchFileReader:
        """The file, opened and checked: once per process while the file is unchanged (a file
        changed since, or gone, is checked again: one line naming it). Only its footer is
        read; a batch is mapped when a row of it is asked for."""
        if self._reader is None:
            path = self.file.path
            try:
                key = (path, self.file.sha256, stat_key(os.stat(path)))
            except OSError:
                key = None  # (gone: open_batches says so)
            if key is None or key not in _readers:
                schema = self.kind.columns.schema
                _readers[key] = open_batches(Path(path), self.file.sha256, schema)
            self._reader = _readers[key]
        return self._reader

    def rows_of(self, start: int, count: int) -> list[dict[str, Any]]:
        """Rows `start` to `start + count` of the file, as Arrow gives them."""
        rows: list[dict[str, Any]] = []
        while count > 0:
            number, offset = divmod(start, self.file.batch_rows)
            if self._batch is None or self._batch[0] != number:
                self._batch = (number, self.reader().get_batch(number))
            taken = min(count, self._batch[1].num_rows - offset)
            if taken <= 0:
                raise ValueError(f"{self.file.path}: not the batches its record names")
            rows += self._batch[1].slice(offset, taken).to_pylist()
            start, count = start + taken, count - taken
        return rows

    def __len__(self) -> int:
        return len(self.window)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> StoredSplit: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return StoredSplit(self.file, self.window[index], self.fields)
        row = self.window[index]  # (an IndexError past the end, as a list's)
        return self.decoded(self.rows_of(row, 1))[0]

    def __iter__(self) -> Iterator[Any]:
        if self.window.step != 1:
            yield from (self[i] for i in range(len(self)))
            return
        for start in range(self.window.start, self.window.stop, READ_ROWS):
            size = min(READ_ROWS, self.window.stop - start)
            yield from self.decoded(self.rows_of(start, size))

    def decoded(self, rows: list[dict[str, Any]]) -> list[Any]:
        columns, fields = self.kind.columns, dict(self.fields)
        instances = [columns.instance(row, self.file.path) for row in rows]
        return [replace(i, **fields) for i in instances] if fields else instances

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same instances in the same order (read to compare)."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # (equal to lists, which have none)

    def replaced(self, **fields: Any) -> StoredSplit:
        """A view whose instances have `fields` set (`dataclasses.replace`)."""
        merged = tuple(sorted({**dict(self.fields), **fields}.items()))
        return StoredSplit(self.file, self.window, merged)

    def first_null(self, column: str) -> int | None:
        """The index of the first instance whose `column` is null: the split's record says
        (nothing is read); a part of it is read."""
        if self.window != range(self.file.rows):
            return next((i for i, x in enumerate(self) if getattr(x, column) is None), None)
        return dict(self.file.first_null).get(column)


def stored_split(directory: Path, name: str, entry: Mapping[str, Any]) -> StoredSplit:
    """Split `name` of a stored result in `directory`, as its record names it (what
    :func:`~.storing.write_split` returned); a record of another shape is a `TypeError` or
    `KeyError` the reader names."""
    file = entry["file"]
    if not isinstance(file, str) or Path(file).name != file or entry["kind"] not in KINDS:
        raise TypeError(f"split '{name}': {file!r} of kind {entry['kind']!r}")
    first_null = tuple(sorted((str(k), int(v)) for k, v in entry["first_null"].items()))
    stored = SplitFile(
        path=str(directory / file),
        sha256=str(entry["sha256"]),
        kind=entry["kind"],
        rows=int(entry["rows"]),
        batch_rows=int(entry["batch_rows"]),
        name=name,
        fingerprint=entry.get("fingerprint"),
        first_null=first_null,
    )
    return StoredSplit(stored)


def first_without(instances: Sequence[Any], field: str) -> int | None:
    """The index of the first instance whose `field` is None, or None: a stored split's column
    scanned, a list's instances read."""
    if isinstance(instances, StoredSplit):
        return instances.first_null(field)
    return next((i for i, x in enumerate(instances) if getattr(x, field) is None), None)


def with_fields(instances: Sequence[Any], **fields: Any) -> Sequence[Any]:
    """`instances` with `fields` set on each: a stored split's view (nothing decoded now), or
    a list."""
    if isinstance(instances, StoredSplit):
        return instances.replaced(**fields)
    return [replace(instance, **fields) for instance in instances]


def split_fingerprint(instances: Sequence[Any], name: str) -> str:
    """`dataset_fingerprint({name: instances})`: a stored split's, as it was computed when the
    split was written; else computed from the instances (a streamed split's: from its record)."""
    if isinstance(instances, StoredSplit) and instances.fingerprint and instances.file.name == name:
        return instances.fingerprint
    return dataset_fingerprint({name: instances})


def data_fingerprint(splits: Mapping[str, Sequence[Any]]) -> str:
    """SHA-256 of every split's fingerprint by name: what node 0 publishes of a job's data and
    the other nodes compare with their copy (a stored split's read from its record)."""
    each = {name: split_fingerprint(instances, name) for name, instances in splits.items()}
    return hashlib.sha256(json.dumps(each, sort_keys=True).encode()).hexdigest()
