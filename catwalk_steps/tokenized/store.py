"""Where a split's tokens are stored, and how they are read.

`<workspace>/tokens/<key>/` (:func:`tokens_root`), `<key>` the digest of what the tokens depend
on (:mod:`.key`), holds the part files (:mod:`.build`) and `tokens.json`: the key itself, each
part's SHA-256 and rows, and the counts of what `max_length` cuts. Every rank, `--parallelism`
slot and sweep cell of the workspace that trains on the same data with the same tokenizer and
`max_length` reads the same files, mapped (the page cache shares them).

Written once: the first process to need a key takes its lock (`<key>.lock`), builds it in a
temporary directory and renames that into place in one step; another process that needs the
key meanwhile waits on the lock, then reads what was written. A process killed while building
leaves a temporary directory, removed by the next builder, never a half-written key. Read
checked: a part whose SHA-256 or columns are not what `tokens.json` says, or a `tokens.json`
of another key or size, is one line naming the file (:class:`~catwalk_steps.sealed.
AlteredFileError`), never a batch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from filelock import FileLock

from ..arrow_tables import open_table
from ..console import announce
from ..files import write_json_atomic
from ..kinds import Collator, kind_of
from ..kinds.collate import NAMES, Tokenized
from ..sealed import AlteredFileError
from ..settings import LoaderSettings
from ..tasks.streamed import is_streamed
from .build import SCHEMA, Part, build_parts
from .key import key_digest, tokens_key

MANIFEST = "tokens.json"


@dataclass(frozen=True)
class StoredTokens:
    """A split's stored tokens, as data (a training job carries it to its workers): where they
    are, their parts, and what `max_length` cuts of the split."""

    directory: Path
    parts: tuple[Part, ...]
    rows: int
    prompts_cut: int = 0
    answers_cut: int = 0

    def column(self) -> pa.ChunkedArray:
        """Every row's tokens, the parts mapped one after another (each checked first)."""
        tables = [open_table(self.directory / p.file, p.sha256, SCHEMA) for p in self.parts]
        return pa.concat_tables(tables).column("tokens")


def int32_view(array: pa.Array) -> np.ndarray:
    """An int32 array's values as a NumPy view of its (mapped) buffer, no copy (Arrow's
    `to_numpy` would import pandas: some 40 MiB in every rank)."""
    values = np.frombuffer(array.buffers()[1], dtype=np.int32)
    return values[array.offset : array.offset + len(array)]


class TokenRows:
    """A row's tokens read from the mapped column through NumPy views of its buffers (no copy):
    a few microseconds a row, where Arrow's `as_py` takes a hundred."""

    def __init__(self, column: pa.ChunkedArray):
        self.starts = np.cumsum([0, *(len(chunk) for chunk in column.chunks)])
        self.chunks = [
            (int32_view(c.offsets), int32_view(c.values.offsets), int32_view(c.values.values))
            for c in column.chunks
        ]

    def __getitem__(self, index: int) -> list[list[int]]:
        chunk = int(np.searchsorted(self.starts, index, side="right")) - 1
        rows, texts, values = self.chunks[chunk]
        row = index - int(self.starts[chunk])
        bounds = texts[rows[row] : rows[row + 1] + 1].tolist()
        return [values[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class TokenizedSplit(Sequence):
    """A split whose items carry their stored tokens (:class:`~catwalk_steps.kinds.collate.
    Tokenized`): what a training loader collates from. Only the rows asked for are read."""

    def __init__(self, instances: Sequence[Any], stored: StoredTokens):
        if len(instances) != stored.rows:
            raise AlteredFileError(
                f"{stored.directory / MANIFEST}: tokens of {stored.rows} rows, and the split "
                f"has {len(instances)}"
            )
        self.instances = instances
        self.stored = stored
        self.tokens = TokenRows(stored.column())

    def __len__(self) -> int:
        return len(self.instances)

    def __getitem__(self, index):  # one row at a time
        index = range(len(self))[index]  # (a negative index from the end)
        return Tokenized(self.instances[index], self.tokens[index])

    def __reduce__(self) -> tuple[Any, ...]:
        return TokenizedSplit, (self.instances, self.stored)  # reopened, never the rows


def tokens_root(workspace: Any, work_dir: Path) -> Path:
    """Where stored tokens live: the workspace's `tokens/` (shared by all its runs), else the
    step's work directory's (a workspace that is not a local directory)."""
    directory = getattr(workspace, "dir", None)
    return Path(directory if directory is not None else work_dir) / "tokens"


def training_tokens(
    loader: LoaderSettings, split: Sequence[Any], data: str, root: Path, log: logging.Logger
) -> StoredTokens | None:
    """A split's stored tokens (`data`: its fingerprint, as stored with it) for `loader`'s
    collate; None where it is not the package's (a collate of one's own tokenizes as it does),
    the split streams (its loader tokenizes each batch as it reads it) or is empty."""
    collate = loader.collate
    if collate.get("type") not in NAMES or not collate.get("tokenizer") or is_streamed(split):
        return None
    if len(split) == 0:
        return None
    collator = Collator(collate["tokenizer"], loader.max_length)
    return stored_training_tokens(kind_of([split[0]]), collator, split, data, root, log)


def stored_training_tokens(
    kind: Any,
    collator: Any,
    split: Sequence[Any],
    data: str,
    root: Path,
    log: logging.Logger,
) -> StoredTokens:
    """The split's tokens (`data`: its fingerprint) as `collator` tokenizes them for `kind`'s
    training batches: read where they are stored, else computed once and stored first."""
    key = tokens_key(data, kind.name, collator)
    digest = key_digest(key)
    directory = root / digest
    if not (directory / MANIFEST).is_file():
        root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(root / f"{digest}.lock")):
            if not (directory / MANIFEST).is_file():  # not written while this one waited
                build(kind, collator, split, key, directory, log)
    stored = read_manifest(directory, key, len(split))
    stored.column()  # each part checked now, before any worker starts
    return stored


def build(
    kind: Any,
    collator: Any,
    split: Sequence[Any],
    key: dict[str, Any],
    directory: Path,
    log: logging.Logger,
) -> None:
    """The split's tokens computed into a temporary directory, moved into place when whole."""
    for stale in directory.parent.glob(f".{directory.name}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)  # a killed builder's (this key's lock is held)
    temporary = directory.parent / f".{directory.name}.{os.getpid()}.tmp"
    temporary.mkdir()
    started = time.monotonic()
    try:
        parts = build_parts(kind, collator, split, temporary)
        manifest = {
            "key": key,
            "rows": len(split),
            "parts": [vars(part) for part in parts],
            "prompts_cut": sum(part.prompts_cut for part in parts),
            "answers_cut": sum(part.answers_cut for part in parts),
        }
        write_json_atomic(temporary / MANIFEST, manifest)
        os.rename(temporary, directory)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    announce(  # on the terminal at Tango's default level, as the training's start is
        log,
        "Tokenized %d rows once in %.1f s (%s): %s",
        len(split),
        time.monotonic() - started,
        "1 process" if len(parts) == 1 else f"{len(parts)} processes",
        directory,
    )


def read_manifest(directory: Path, key: dict[str, Any], rows: int) -> StoredTokens:
    """`tokens.json`, checked to be of this key and this many rows."""
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        parts = tuple(Part(**part) for part in manifest["parts"])
        stored = StoredTokens(
            directory, parts, manifest["rows"], manifest["prompts_cut"], manifest["answers_cut"]
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise AlteredFileError(
            f"{path}: not the manifest its tokens were written with ({type(e).__name__}: {e}); "
            f"remove {directory} to tokenize again"
        ) from None
    if manifest["key"] != key or stored.rows != rows or sum(p.rows for p in parts) != rows:
        raise AlteredFileError(
            f"{path}: not the manifest its tokens were written with (another key or size); "
            f"remove {directory} to tokenize again"
        )
    return stored
