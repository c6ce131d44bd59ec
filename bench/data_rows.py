"""Stored splits at size (issue 56): generated files of N rows loaded by `catwalk::load_task`
(cold: every row read, checked and stored as Arrow as it comes), then the cached result read
back in a fresh process (the time and the memory of reading it, of one row decoded, and of the
split pickled, as a training job sends it to its workers).

    python bench/data_rows.py                       # sft, 10k / 100k / 1M rows
    python bench/data_rows.py --rows 10000 --kind preference --work /tmp/rows

Kinds: `sft` (a generative task of one's own from a JSON-lines file: a question of ~60 words,
an answer of ~20) and `preference` (prompt, chosen, rejected texts). Each measurement runs in a
process of its own (its peak RSS is its own). The results go to bench/results/data_rows.{json,md}
(docs/results.md quotes them). The functions are for other benchmarks too (bench/data_scale.py):
:func:`write_rows`, :func:`load_cold`, :func:`read_cached`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, machine, write_results

WORDS = [c + v + e for c in "bdfklmnprst" for v in ("a", "e", "io", "ou") for e in ("", "n", "ter")]
TASKS = {
    "sft": {
        "type": "catwalk::generative",
        "name": "sft",
        "source": "files",
        "doc_to_text": "Q: {{q}}\nA:",
        "doc_to_target": "{{a}}",
        "until": ["\n"],
        "max_gen_toks": 32,
        "split": "train",  # (its one file: no validation split)
    },
    "preference": {"type": "catwalk::preference", "name": "pairs", "source": "files"},
}


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(WORDS, k=words))


def write_rows(path: Path, count: int, kind: str = "sft", seed: int = 0) -> Path:
    """`count` rows of `kind` as JSON lines (the same first rows for the same seed)."""
    rng = random.Random(seed)
    with path.open("w") as f:
        for _ in range(count):
            if kind == "sft":
                row = {"q": text(rng, 60), "a": text(rng, 20)}
            else:
                row = {"prompt": text(rng, 60), "chosen": text(rng, 20), "rejected": text(rng, 20)}
            f.write(json.dumps(row) + "\n")
    return path


def child(*arguments: str) -> dict:
    """This script's `--child ...` in a fresh interpreter: what it measured (JSON)."""
    command = [sys.executable, __file__, "--child", *arguments]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.splitlines()[-1])


def load_cold(path: Path, kind: str, workspace: Path) -> dict:
    """`catwalk::load_task` of the file's rows (its `train` split), in a process of its own:
    seconds, its peak RSS, the stored result's directory and size."""
    return child("load", str(path), kind, str(workspace))


def read_cached(result: Path) -> dict:
    """The cached result read back in a process of its own: see :func:`measure_read`."""
    return child("read", str(result))


def measure_load(path: str, kind: str, workspace: str) -> dict:
    import resource

    from catwalk_steps.steps.load_task import LoadTask
    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    task = {**TASKS[kind], "data_files": {"train": path}}
    step = LoadTask(task=task, splits=["train"])
    shared = SharedLocalWorkspace(Path(workspace))
    started = time.perf_counter()
    step.result(shared)
    seconds = time.perf_counter() - started
    result = shared.step_dir(step)
    return {
        "seconds": round(seconds, 2),
        "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "result": str(result),
        "arrow_mib": round(sum(p.stat().st_size for p in result.glob("*.arrow")) / 2**20, 1),
    }


def rss_mib() -> dict[str, float]:
    status = Path("/proc/self/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {k: round(int(fields[k].split()[0]) / 1024, 1) for k in ("VmRSS", "RssAnon", "RssFile")}


def measure_read(result: str) -> dict:
    """Seconds and RSS of reading the result (`InstancesFormat.read`: its record, each file
    mapped and its digest checked), twice in this process; one row decoded at random; the
    split pickled. (A process that finds a file's digest not yet recorded, as the first after
    the one that wrote it may, hashes the file once: :mod:`catwalk_steps.file_digests`.)"""
    import pickle

    from catwalk_steps.workspace.formats import InstancesFormat

    before = rss_mib()
    times = []
    for _ in range(2):
        started = time.perf_counter()
        data = InstancesFormat().read(result)
        times.append(round(time.perf_counter() - started, 4))
    after = rss_mib()
    split = data["train"]
    started = time.perf_counter()
    split[random.Random(1).randrange(len(split))]
    row_seconds = time.perf_counter() - started
    return {
        "rows": len(split),
        "read_seconds": times,
        "rss_before": before,
        "rss_after": after,
        "one_row_ms": round(row_seconds * 1000, 2),
        "pickled_bytes": len(pickle.dumps(split)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="10000,100000,1000000")
    parser.add_argument("--kind", default="sft", choices=sorted(TASKS))
    parser.add_argument("--work", default="/tmp/catwalk-data-rows")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for count in map(int, args.rows.split(",")):
        path = write_rows(work / f"{args.kind}_{count}.jsonl", count, args.kind)
        workspace = work / f"ws_{args.kind}_{count}"
        shutil.rmtree(workspace, ignore_errors=True)  # cold: nothing cached
        cold = load_cold(path, args.kind, workspace)
        result = Path(cold.pop("result"))
        first = read_cached(result)  # (may hash the file: its digest not yet recorded)
        rows.append({"count": count, "file_mib": round(path.stat().st_size / 2**20, 1), **cold})
        rows[-1].update(read_cached(result), first_process_read_seconds=first["read_seconds"])
        print(json.dumps(rows[-1]), flush=True)
    header = (
        "| rows | file MiB | Arrow MiB | cold load s | load peak MiB | cached read s | RSS before "
        "→ after read MiB | one row ms | pickled bytes |\n" + "|---" * 9 + "|\n"
    )
    lines = "".join(
        f"| {r['count']:,} | {r['file_mib']} | {r['arrow_mib']} | {r['seconds']} | {r['peak_mib']} "
        f"| {r['read_seconds'][0]} | {r['rss_before']['VmRSS']} → {r['rss_after']['VmRSS']} "
        f"| {r['one_row_ms']} | {r['pickled_bytes']} |\n"
        for r in rows
    )
    payload = {"kind": args.kind, "machine": machine(), "rows": rows}
    write_results(f"data_rows_{args.kind}", payload, header + lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.path.insert(0, str(REPO))
        what, *rest = sys.argv[2:]
        measured = measure_load(*rest) if what == "load" else measure_read(*rest)
        print(json.dumps(measured))
    else:
        main()
