"""A stored split: a `catwalk::load_task` split kept as one Arrow file, read as a sequence of
instances that its kind decodes one by one when asked (:attr:`~.base.TaskKind.columns`).

Nothing is read when a split is opened but the file's footer: the file is memory-mapped, its
SHA-256 checked once while it is unchanged (:func:`~catwalk_steps.arrow_tables.open_table`),
and a process holds no row until it asks for one. The processes that read one split (a run's
ranks, its `--parallelism` slots, a sweep's cells) share its pages through the page cache.

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
from dataclasses import replace
from pathlib import Path
from typing import Any, overload

import pyarrow as pa
import pyarrow.compute as pc

from ..arrow_tables import open_table
from ..file_digests import stat_key
from ..tasks.base import dataset_fingerprint
from .base import KINDS, TaskKind, kind_named

READ_ROWS = 1024  # rows decoded at a time when a split is iterated

# This process's mapped files, by (path, digest, the file's stat: as file_digests keys them).
_tables: dict[tuple[str, str, tuple[int, ...]] | None, pa.Table] = {}


class StoredSplit(Sequence[Any]):
    """The instances of one stored split (see the module).

    :param path: the Arrow file; `sha256` its digest, written with it.
    :param kind: the name of its instances' kind; `rows` how many the file holds.
    :param name: the split's name; `fingerprint` its `dataset_fingerprint({name: instances})`,
        computed when it was written (None where it was not).
    :param window: the rows of the file this sequence is (all of them when None).
    :param fields: fields every instance gets (`(("training", True),)`).
    """

    def __init__(
        self,
        path: str,
        sha256: str,
        kind: str,
        rows: int,
        name: str = "",
        fingerprint: str | None = None,
        window: range | None = None,
        fields: tuple[tuple[str, Any], ...] = (),
    ):
        self.path, self.sha256, self.kind_name, self.rows = str(path), sha256, kind, rows
        self.name, self.fingerprint = name, fingerprint
        self.window = range(rows) if window is None else window
        self.fields = fields
        self._table: pa.Table | None = None  # this process's mapping (never pickled)

    def __reduce__(self) -> tuple[Any, ...]:
        """What another process gets: where the rows are, never the rows."""
        arguments = (self.path, self.sha256, self.kind_name, self.rows, self.name)
        return (type(self), (*arguments, self.fingerprint, self.window, self.fields))

    def __repr__(self) -> str:
        return f"StoredSplit({self.path!r}, {len(self)} of {self.rows} {self.kind_name} rows)"

    @property
    def kind(self) -> TaskKind:
        return kind_named(self.kind_name)

    def table(self) -> pa.Table:
        """The file, mapped and checked: once per process while the file is unchanged (a
        file changed since, or gone, is checked again: one line naming it)."""
        if self._table is None:
            try:
                key = (self.path, self.sha256, stat_key(os.stat(self.path)))
            except OSError:
                key = None  # (gone: open_table says so)
            if key is None or key not in _tables:
                table = open_table(Path(self.path), self.sha256, self.kind.columns.schema)
                _tables[key] = table
            self._table = _tables[key]
        return self._table

    def __len__(self) -> int:
        return len(self.window)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> StoredSplit: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self.view(self.window[index], self.fields)
        row = self.window[index]  # (an IndexError past the end, as a list's)
        return self.decoded(self.table().slice(row, 1).to_pylist())[0]

    def __iter__(self) -> Iterator[Any]:
        if self.window.step != 1:
            yield from (self[i] for i in range(len(self)))
            return
        table = self.table()
        for start in range(self.window.start, self.window.stop, READ_ROWS):
            size = min(READ_ROWS, self.window.stop - start)
            yield from self.decoded(table.slice(start, size).to_pylist())

    def decoded(self, rows: list[dict[str, Any]]) -> list[Any]:
        columns, fields = self.kind.columns, dict(self.fields)
        instances = [columns.instance(row, self.path) for row in rows]
        return [replace(i, **fields) for i in instances] if fields else instances

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same instances in the same order (read to compare)."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # (equal to lists, which have none)

    def view(self, window: range, fields: tuple[tuple[str, Any], ...]) -> StoredSplit:
        whole = window == range(self.rows) and not fields
        fingerprint = self.fingerprint if whole else None
        stored = (self.path, self.sha256, self.kind_name, self.rows, self.name)
        return StoredSplit(*stored, fingerprint, window, fields)

    def replaced(self, **fields: Any) -> StoredSplit:
        """A view whose instances have `fields` set (`dataclasses.replace`)."""
        return self.view(self.window, tuple(sorted({**dict(self.fields), **fields}.items())))

    def first_null(self, column: str) -> int | None:
        """The index of the first instance whose `column` is null (a column scan: no instance
        is decoded), or None."""
        if self.window.step != 1:
            return next((i for i, x in enumerate(self) if getattr(x, column) is None), None)
        values = self.table().column(column).slice(self.window.start, len(self))
        found = pc.index(pc.is_null(values), True).as_py()
        return None if found < 0 else found


def stored_split(directory: Path, name: str, entry: Mapping[str, Any]) -> StoredSplit:
    """Split `name` of a stored result in `directory`, as its record names it (what
    :func:`~.storing.write_split` returned); a record of another shape is a `TypeError` or
    `KeyError` the reader names."""
    file = entry["file"]
    if not isinstance(file, str) or Path(file).name != file or entry["kind"] not in KINDS:
        raise TypeError(f"split '{name}': {file!r} of kind {entry['kind']!r}")
    return StoredSplit(
        str(directory / file),
        entry["sha256"],
        entry["kind"],
        int(entry["rows"]),
        name,
        entry.get("fingerprint"),
    )


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
    split was written; else computed from the instances."""
    if isinstance(instances, StoredSplit) and instances.fingerprint and instances.name == name:
        return instances.fingerprint
    return dataset_fingerprint({name: list(instances)})


def data_fingerprint(splits: Mapping[str, Sequence[Any]]) -> str:
    """SHA-256 of every split's fingerprint by name: what node 0 publishes of a job's data and
    the other nodes compare with their copy (a stored split's read from its record)."""
    each = {name: split_fingerprint(instances, name) for name, instances in splits.items()}
    return hashlib.sha256(json.dumps(each, sort_keys=True).encode()).hexdigest()
