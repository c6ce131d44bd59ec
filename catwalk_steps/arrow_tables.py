"""Tables stored as Arrow IPC files: written once, memory-mapped when read, checked first.

A task's rows and their token ids can be millions of rows: parsed into Python objects they cost
every process that reads them seconds and gigabytes. Stored as an Arrow IPC file, they are read
by mapping the file: nothing is parsed until a row is asked for, and the processes that read one
file (a run's ranks, its `--parallelism` slots, a sweep's cells) share its pages through the page
cache. The file is data: Arrow's columns, never a pickle.

- :func:`write_table` writes record batches as they come (a table larger than memory never is
  whole in it) to a temporary name, flushes it, renames it in one step and returns its SHA-256;
  a full disk is one line naming the file (:mod:`.files`).
- :func:`open_table` maps it once its SHA-256 is the one written with it (each file hashed once
  while it is unchanged, whichever process asks: :mod:`.file_digests`) and Arrow has read its
  footer and schema; a file that differs, is cut or is not Arrow is one line naming it
  (:class:`~catwalk_steps.sealed.AlteredFileError`), before any row is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from .file_digests import file_digests
from .files import write_atomic
from .sealed import AlteredFileError, altered


def write_table(
    path: Path, schema: pa.Schema, batches: Iterable[pa.RecordBatch | Mapping[str, Any]]
) -> str:
    """Writes `batches` (record batches, or {column: values} of `schema`) as one Arrow IPC
    file at `path`, atomically; returns the file's SHA-256."""

    def write(temporary: Path) -> None:
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for batch in batches:
                if not isinstance(batch, pa.RecordBatch):
                    batch = pa.RecordBatch.from_pydict(dict(batch), schema=schema)
                writer.write_batch(batch)

    write_atomic(Path(path), write)
    return file_digests([Path(path)])[0]


def open_table(path: Path, sha256: str | None, schema: pa.Schema | None = None) -> pa.Table:
    """The table in `path`, memory-mapped (no row is read here), once the file's SHA-256 is
    `sha256` (None: a file this process has just written and checked) and its schema is
    `schema` (when given)."""
    reader = open_batches(path, sha256, schema)
    try:
        return reader.read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise not_arrow(Path(path), e) from None


def open_batches(
    path: Path, sha256: str | None, schema: pa.Schema | None = None
) -> pa.ipc.RecordBatchFileReader:
    """As :func:`open_table`, reading only the file's footer: each record batch is read (its
    pages mapped) when it is asked for (`get_batch`), so opening a file of a million rows
    maps a few pages of it, whatever its size."""
    path = Path(path)
    if not path.is_file():
        raise AlteredFileError(f"{path}: missing (the table was written with the result)")
    if sha256 is not None and file_digests([path])[0] != sha256:
        raise AlteredFileError(f"{path}: {altered('the one written with it')}")
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
    except (pa.ArrowInvalid, OSError) as e:
        raise not_arrow(path, e) from None
    if schema is not None and not reader.schema.equals(schema):
        raise AlteredFileError(
            f"{path}: its columns are {reader.schema.names}, not the {schema.names} of its kind"
        )
    return reader


def not_arrow(path: Path, error: BaseException) -> AlteredFileError:
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return AlteredFileError(f"{path}: not an Arrow table ({first})")
