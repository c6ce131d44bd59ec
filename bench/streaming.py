"""A streamed training split (`streaming: true`) at growing sizes: what the graph build pays
(the file's digest, hashed once while it is unchanged), how fast a rank reads its rows (alone,
and one of two: every rank reads the file and keeps its share), how fast the loader gives
collated batches, what resuming at a position costs (the rows before it read again, never
rendered), and the process's peak memory, which does not grow with the file.

    PYTHONPATH=$PWD python bench/streaming.py [rows ...]   # default 10000 100000 300000

Results: bench/results/streaming.json and .md.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

from common import machine, read_status_kib, reset_peak_rss, write_results
from tango.common import Lazy, Params
from tango.integrations.torch import DataLoader

from catwalk_steps.settings import LoaderSettings
from catwalk_steps.tasks import Task
from catwalk_steps.tasks.streamed import streamed_split
from catwalk_steps.training.streaming import StreamLoader

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "hex",
]
TASK = {
    "type": "catwalk::generative",
    "name": "sft",
    "source": "files",
    "doc_to_text": "{{prompt}}\nAnswer:",
    "doc_to_target": "{{answer}}",
    "until": ["\n"],
    "streaming": True,
}
BATCH, BATCHES, SKIP = 16, 100, 1000


def write_file(path: Path, rows: int) -> None:
    """SFT rows as the issue's table: a prompt of ~60 words, an answer of ~20."""
    with path.open("w") as f:
        for i in range(rows):
            prompt = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(60))
            answer = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(20))
            f.write(json.dumps({"prompt": f"{i}: {prompt}", "answer": answer}) + "\n")


def peak_mib() -> float:
    """The process's resident high-water mark since :func:`reset_peak_rss`."""
    return read_status_kib("VmHWM") / 1024


def batches(split, skip: int):
    """The loader's batches from the `skip`-th on (shuffled, batches of BATCH)."""
    params = {"type": "catwalk::sharded", "batch_size": BATCH, "shuffle": True, "seed": 1}
    collate = {"type": "catwalk::collate", "tokenizer": "catwalk::byte_level"}
    lazy = Lazy(DataLoader, Params({**params, "collate_fn": {**collate, "max_length": 512}}))
    return StreamLoader(split, LoaderSettings.of(lazy, "train_dataloader")).epoch_batches(0, skip)


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(directory: Path, rows: int) -> dict:
    path = directory / f"sft_{rows}.jsonl"
    write_file(path, rows)
    # The same file as the split evaluated too: its first row read alone (targets listed?).
    config = {**TASK, "data_files": {"train": str(path), "validation": str(path)}}
    reset_peak_rss()
    started = time.perf_counter()
    task = Task.from_params(copy.deepcopy(config))  # the graph build: the file's digest
    cold_build = time.perf_counter() - started
    started = time.perf_counter()
    Task.from_params(copy.deepcopy(config))
    warm_build = time.perf_counter() - started
    split = streamed_split(task, config, None, None, None)
    result = {"rows": rows, "file_mb": round(path.stat().st_size / 1e6, 1)}
    result |= {"graph_build_cold_s": round(cold_build, 2), "graph_build_s": round(warm_build, 3)}
    for world in (1, 2):
        started = time.perf_counter()
        count = sum(1 for _ in split.rows(1, True, 0, 0, world))
        result[f"rank_rows_per_s_of_{world}"] = round(count / (time.perf_counter() - started))
    stream = batches(split, 0)
    result["first_batch_s"] = round(timed(lambda: next(stream)), 2)
    taken = timed(lambda: list(islice(stream, BATCHES)))
    result["batches_per_s"] = round(BATCHES / taken, 1)
    result[f"first_batch_at_{SKIP}_s"] = round(timed(lambda: next(batches(split, SKIP))), 2)
    result["peak_rss_mib"] = round(peak_mib(), 1)
    return result


def main() -> None:
    sizes = [int(n) for n in sys.argv[1:]] or [10_000, 100_000, 1_000_000]
    with tempfile.TemporaryDirectory() as directory:
        measure(Path(directory), 1000)  # imports and first calls, not counted
        results = [measure(Path(directory), rows) for rows in sizes]
    keys = list(results[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in results]
    write_results("streaming", {"machine": machine(), "results": results}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
