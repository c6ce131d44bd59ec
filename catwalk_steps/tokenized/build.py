"""A split's tokens computed cold, on every core, streaming.

Rows are read a chunk at a time (a stored split, :class:`~catwalk_steps.kinds.stored.
StoredSplit`, decodes a chunk's rows from its mapped file a record batch at a time: no process
holds the split); each chunk's texts (its kind's
:meth:`~catwalk_steps.kinds.TaskKind.token_texts`) are tokenized by the collate's own rule
(:func:`~catwalk_steps.scoring.tokenization.tokenize_keys`: one batched call per setting of
special tokens) and written as one Arrow record batch, so no more than a chunk's tokens are
ever in memory as Python lists. The prompts and answers that `max_length` cuts are counted on
the way (the warnings of a training start read the counts, not the rows).

A split of more than :data:`PARALLEL_ROWS` rows is shared out by contiguous ranges between
processes forked from this one, one per usable core: each reads its own range of the split
(mapped: the pages of its rows) and writes its own part file. What a process reports is
data, a JSON file: its part's digest, rows and counts, or its error's type and message, raised
here again (in one line where the error is one of those).

Measured (`bench/tokenize_once.py`, docs/results.md): 1,000,000 SFT rows (~92 tokens each) in
333 s on 2 shared cores, this process 17 MiB above the rows it holds; the tokenizer's batched
call is most of the time.
"""

from __future__ import annotations

import gc
import json
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..arrow_tables import write_table
from ..distributed.devices import usable_cores
from ..errors import rebuilt
from ..files import write_json_atomic
from ..scoring.tokenization import tokenize_keys

SCHEMA = pa.schema([("tokens", pa.list_(pa.list_(pa.int32())))])  # a row: its texts' ids
CHUNK = 4096  # rows tokenized in one call (and written as one record batch)
PARALLEL_ROWS = 20_000  # a split with fewer rows is tokenized in this process alone


@dataclass(frozen=True)
class Part:
    """One part file of a split's tokens: rows `start` to `start + rows` of the split."""

    file: str
    sha256: str
    start: int
    rows: int
    prompts_cut: int = 0
    answers_cut: int = 0


def token_batches(
    kind: Any, collator: Any, split: Sequence[Any], start: int, stop: int, counts: list[int]
) -> Iterator[pa.RecordBatch]:
    """Rows `start` to `stop` of `split` as record batches of their texts' tokens, a chunk at a
    time; `counts` gets the chunk's (prompts cut, answers cut) added."""
    tokenizer = collator.encoder.tokenizer
    for begin in range(start, stop, CHUNK):
        # A chunk's instances: a stored split's view of the rows, decoded a record batch at a
        # time (never the whole split in this process).
        instances = list(split[begin : min(begin + CHUNK, stop)])
        texts = [kind.token_texts(collator, instance) for instance in instances]
        known = tokenize_keys(tokenizer, [key for keys in texts for key in keys])
        prompts, answers = kind.cuts(collator, instances, known)
        counts[0] += prompts
        counts[1] += answers
        rows = pa.array([[known[key] for key in keys] for keys in texts], SCHEMA[0].type)
        yield pa.RecordBatch.from_arrays([rows], schema=SCHEMA)


def write_part(
    kind: Any, collator: Any, split: Sequence[Any], bounds: tuple[int, int], path: Path
) -> Part:
    start, stop = bounds
    counts = [0, 0]
    sha256 = write_table(path, SCHEMA, token_batches(kind, collator, split, start, stop, counts))
    return Part(path.name, sha256, start, stop - start, *counts)


def build_parts(kind: Any, collator: Any, split: Sequence[Any], directory: Path) -> list[Part]:
    """The split's tokens written into `directory` as part files, in row order."""
    rows = len(split)
    processes = max(1, min(usable_cores(), rows // PARALLEL_ROWS))
    bounds = [(rows * p // processes, rows * (p + 1) // processes) for p in range(processes)]
    if processes == 1:
        return [write_part(kind, collator, split, bounds[0], directory / "tokens-0.arrow")]
    children: dict[int, int] = {}
    # This process's objects out of the collector's reach while the children are forked: a
    # child's collections would otherwise write to (and so copy) every page they are on.
    gc.freeze()
    try:
        for number, part in enumerate(bounds):
            pid = os.fork()
            if pid == 0:  # the child: its part, its report, and out (never back into the caller)
                run_part(kind, collator, split, part, directory, number)
            children[pid] = number
        for pid in list(children):
            os.waitpid(pid, 0)
            del children[pid]
    finally:
        gc.unfreeze()
        for pid in children:  # interrupted: the processes this one started, stopped
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
    return [reported(directory, number) for number in range(processes)]


def run_part(
    kind: Any,
    collator: Any,
    split: Sequence[Any],
    bounds: tuple[int, int],
    directory: Path,
    number: int,
) -> None:
    """In a forked process: part `number` written, then its report; exits, whatever happens."""
    code = 1
    try:
        # One process per core already: the tokenizer's own threads would only compete (and
        # it would say, on every fork, that it turns them off).
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            part = write_part(kind, collator, split, bounds, directory / f"tokens-{number}.arrow")
            report: dict[str, Any] = asdict(part)
        except Exception as e:
            name = f"{type(e).__module__}.{type(e).__qualname__}"
            report = {"error": name, "message": str(e)}
        write_json_atomic(directory / f"part-{number}.json", report)
        code = 0
    finally:
        os._exit(code)


def reported(directory: Path, number: int) -> Part:
    """Part `number` as its process reported it; its error raised again here."""
    path = directory / f"part-{number}.json"
    if not path.is_file():
        raise RuntimeError(f"{path}: the process tokenizing part {number} ended without a report")
    report = json.loads(path.read_text())
    path.unlink()
    if "error" in report:
        error = rebuilt(report["error"], report["message"])
        raise error or RuntimeError(f"tokenizing part {number}: {report['message']}")
    return Part(**report)
