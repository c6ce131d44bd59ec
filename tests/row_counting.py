"""Counts the data rows each process of a `tango run` reads, for tests that include it
(`tango run -i tests.row_counting`, with `CATWALK_ROW_COUNTS` naming a directory): lines of
task files read (every JSON-lines reader goes through `text_lines`) and rows of stored splits
decoded (`StoredSplit.decoded`), per file; those a split's tokens build decodes in this
process (`tokenized`: a split of few rows is tokenized in the step's process) apart. With
them, the process's memory when it ends (`VmHWM`, `RssAnon`, `RssFile`, `RssShmem`, KiB).

Each process writes `<pid>.json` there when it ends: the `tango run` process (with what it had
read when its executor started, that is, at graph build) and each training worker (forked from
the worker server, which imports this module as the job's included package)."""

from __future__ import annotations

import atexit
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from catwalk_steps.kinds.stored import StoredSplit
from catwalk_steps.launch import worker_process
from catwalk_steps.tango_fixes.executor import CatwalkExecutor
from catwalk_steps.tasks import reading, sources
from catwalk_steps.tokenized import build

DIRECTORY = os.environ.get("CATWALK_ROW_COUNTS")


class Counts:
    def __init__(self) -> None:
        self.lines: Counter[str] = Counter()  # file -> lines read
        self.decoded: Counter[str] = Counter()  # stored split's file -> rows decoded
        self.tokenized: Counter[str] = Counter()  # the same, by a tokens build in this process
        self.building = False
        self.graph_build: dict[str, Any] | None = None

    def snapshot(self) -> dict[str, Any]:
        return {"lines": dict(self.lines), "decoded": dict(self.decoded)}

    def write(self, role: str) -> None:
        if DIRECTORY:
            record = {"role": role, **self.snapshot(), "graph_build": self.graph_build}
            record |= {"tokenized": dict(self.tokenized), "memory": memory_kib()}
            Path(DIRECTORY, f"{os.getpid()}.json").write_text(json.dumps(record))


def memory_kib() -> dict[str, int]:
    fields = ("VmHWM", "RssAnon", "RssFile", "RssShmem")
    lines = Path("/proc/self/status").read_text().splitlines()
    return {k: int(v.split()[0]) for k, _, v in (x.partition(":") for x in lines) if k in fields}


COUNTS = Counts()
_lines = reading.text_lines
_decoded = StoredSplit.decoded
_write_part = build.write_part
_execute = CatwalkExecutor.execute_step_graph
_leave = worker_process.leave_finished_worker


def counted_lines(path: Path):
    for item in _lines(path):
        COUNTS.lines[str(path)] += 1
        yield item


def counted_decoded(self: StoredSplit, rows: list) -> list:
    (COUNTS.tokenized if COUNTS.building else COUNTS.decoded)[self.file.path] += len(rows)
    return _decoded(self, rows)


def counted_write_part(*args: Any) -> Any:
    """A part of a split's tokens written in this process (a forked one's rows are its own)."""
    COUNTS.building = True
    try:
        return _write_part(*args)
    finally:
        COUNTS.building = False


def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
    COUNTS.graph_build = COUNTS.snapshot()  # what was read before any step ran
    return _execute(self, *args, **kwargs)


def counted_leave() -> None:
    """A training worker's end (it leaves without interpreter shutdown: no `atexit`)."""
    COUNTS.write("worker")
    _leave()


if DIRECTORY:
    reading.text_lines = counted_lines  # (iter_jsonl looks it up when it runs)
    sources.text_lines = counted_lines  # (FileSource.fields: its own name for it)
    StoredSplit.decoded = counted_decoded  # type: ignore[method-assign]
    build.write_part = counted_write_part  # (build_parts looks it up when it runs)
    CatwalkExecutor.execute_step_graph = counted_execute  # type: ignore[method-assign]
    worker_process.leave_finished_worker = counted_leave
    atexit.register(COUNTS.write, "main")
