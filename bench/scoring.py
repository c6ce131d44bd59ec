"""Benchmark: catwalk's scoring against lm-evaluation-harness 0.4.13, on the same requests.

    python bench/scoring.py --lmeval-python bench/.venv-lmeval/bin/python \\
        [--models gpt2-small,tiny] [--tasks piqa,hellaswag,arc_easy,mmlu] [--repeats 3]

For each model and task, interleaved rounds (best of `--repeats`, the order rotating each
round) of: lm-eval's Hugging Face backend (`HFLM.loglikelihood`, in its own venv, the process
kept alive between rounds), catwalk's path before shared contexts (every (context, choice)
sequence in full: `score_choices(share_contexts=False)`) and the shared-context path (packed
rows). Same model directory, same requests (built by lm-eval from the offline data), batch 32,
float32. Reports requests/s and ratios, the largest per-instance relative difference in
log-likelihood, and whether acc and acc_norm pick the same answer for every instance. Rows
accumulate in bench/results/<name>.json across runs; the markdown table is rewritten from it.
`--profile` prints where the shared path's time goes (torch.profiler, one task).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import REPO, RESULTS, machine, write_results
from scoring_flops import gflop_per_request
from scoring_setup import BENCH, build_models, build_requests, default_data_root, load_requests

sys.path.insert(0, str(REPO))  # the checkout this file is in, whatever the venv has installed

from catwalk_steps.kinds.multiple_choice import metrics_from_scores
from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.scoring.packing import packed_rows
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.sequences import SequenceEncoder, answer_chars
from catwalk_steps.tasks.base import MultipleChoiceInstance

MAX_LENGTH = 1024  # the models' positions, which is lm-eval's max_length for them
PATHS = ("lm-eval", "before", "shared")


class LmEval:
    """lm-eval's scorer in its own venv, one process per model, asked for one task at a time."""

    def __init__(self, python: str, requests: Path, model: Path, batch_size: int, device: str):
        command = [python, str(BENCH / "lmeval_side.py"), "serve", "--requests", str(requests)]
        command += ["--model", str(model), "--batch-size", str(batch_size), "--device", device]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.read("READY")

    def read(self, prefix: str) -> str:
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line[len(prefix) :]
        raise SystemExit(f"lm-eval's process ended (exit code {self.process.wait()})")

    def score(self, task: str, picks: list[int]) -> tuple[float, list[list[float]]]:
        self.process.stdin.write(f"{task} {','.join(map(str, picks))}\n")
        self.process.stdin.flush()
        result = json.loads(self.read("RESULT "))
        return result["seconds"], result["scores"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def ours(model, instances, args, shared: bool) -> tuple[float, list[list[float]]]:
    def run(chosen):
        return score_choices(
            model, chosen, args.batch_size, MAX_LENGTH, args.device, progress=False,
            share_contexts=shared,
        )  # fmt: skip

    run(instances[:8])  # warm-up
    start = time.perf_counter()
    scores = run(instances)
    if args.device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, scores


def spread(total: int, limit: int | None) -> list[int]:
    """The positions of at most `limit` of `total` docs, taken evenly through the list (so
    MMLU's five subjects all stay)."""
    if limit is None or limit >= total:
        return list(range(total))
    return [k * total // limit for k in range(limit)]


def worst(scores, reference, relative: bool) -> float:
    """The largest per-request difference in log-likelihood (relative to the reference's)."""
    return max(
        abs(x - y) / (max(abs(y), 1e-6) if relative else 1.0)
        for row, ref in zip(scores, reference, strict=True)
        for x, y in zip(row, ref, strict=True)
    )


def predictions(instances, scores) -> list[tuple[int, int]]:
    """Each instance's answer by score (acc) and by score per character (acc_norm)."""
    out = []
    for instance, row in zip(instances, scores, strict=True):
        per_char = [x / max(1, answer_chars(c)) for x, c in zip(row, instance.choices, strict=True)]
        out.append(
            (
                max(range(len(row)), key=row.__getitem__),
                max(range(len(row)), key=per_char.__getitem__),
            )
        )
    return out


def token_counts(sequences) -> dict[str, float]:
    """Mean tokens per context and per continuation, and tokens fed per request by each path."""
    rows = packed_rows(sequences)
    n = len(sequences)
    return {
        "context_tokens": sum(len(r.context) for r in rows) / len(rows),
        "continuation_tokens": sum(s.continuation_length for s in sequences) / n,
        "fed_before": sum(len(s.token_ids) for s in sequences) / n,
        "fed_shared": sum(r.length for r in rows) / n,
    }


def measure(lm_eval, model, task, picks, instances, args) -> dict:
    """Interleaved rounds of each path; without `lm_eval` (a GPU machine without its venv),
    the lm-eval columns stay empty."""
    runs = {
        "lm-eval": lambda: lm_eval.score(task, picks),
        "before": lambda: ours(model, instances, args, shared=False),
        "shared": lambda: ours(model, instances, args, shared=True),
    }
    paths = PATHS if lm_eval is not None else PATHS[1:]
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    scores = {}
    for r in range(args.repeats):
        for name in paths[r % len(paths) :] + paths[: r % len(paths)]:
            t, scores[name] = runs[name]()
            seconds[name].append(t)
            print(f"  round {r}: {name} {t:.2f} s", flush=True)
    requests = sum(len(i.choices) for i in instances)
    rate = {name: requests / min(seconds[name]) for name in paths}
    sequences = SequenceEncoder(model.tokenizer, MAX_LENGTH).sequences(instances)
    gflop = gflop_per_request(model.lm, sequences, args.batch_size)
    answers = {name: predictions(instances, scores[name]) for name in paths}
    row = {
        "docs": len(instances),
        "requests": requests,
        **token_counts(sequences),
        "seconds": seconds,
        "requests_per_s": rate,
        "gflop_per_request": gflop,
        "gflop_per_s": {name: gflop[name] * rate[name] for name in paths},
        "metrics": metrics_from_scores(instances, scores["shared"]),
    }
    for name, key in (("before", "before"), ("lm-eval", "lmeval")):
        if name in paths:
            row[f"shared_vs_{key}"] = rate["shared"] / rate[name]
            row[f"max_rel_diff_vs_{key}"] = worst(scores["shared"], scores[name], relative=True)
            row[f"max_abs_diff_vs_{key}"] = worst(scores["shared"], scores[name], relative=False)
            row[f"same_answers_as_{key}"] = answers["shared"] == answers[name]
    if "lm-eval" in paths:
        row["before_vs_lmeval"] = rate["before"] / rate["lm-eval"]
    return row


def cell(value, form: str) -> str:
    return "-" if value is None else format(value, form)


def ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def per_path(values: dict | None, form: str) -> str:
    """lm-eval / before / shared, '-' where a path was not measured."""
    values = values or {}
    return " / ".join(cell(values.get(path), form) for path in PATHS)


def table(rows: dict, name: str) -> str:
    lines = [
        f"Scoring against lm-evaluation-harness 0.4.13 ({name}): same model directory, same "
        "requests (lm-eval's, from the offline data), batch 32, float32; best of interleaved "
        "rounds. `before`: every (context, choice) sequence in full; `shared`: packed rows.",
        "",
        "| model | task | docs | requests | tokens ctx / cont | fed per request before / "
        "shared | lm-eval req/s | before req/s | shared req/s | shared / lm-eval | shared / "
        "before | max rel. diff vs before / lm-eval | max abs. diff vs lm-eval | "
        "same acc, acc_norm answers | GFLOP per request lm-eval / before / shared | "
        "GFLOP/s lm-eval / before / shared |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for key, r in rows.items():
        model, task = key.split("/")
        rate = r["requests_per_s"]
        same = r["same_answers_as_before"] and r.get("same_answers_as_lmeval", True)
        lines.append(
            f"| {model} | {task} | {r['docs']} | {r['requests']} | "
            f"{r['context_tokens']:.0f} / {r['continuation_tokens']:.1f} | "
            f"{r['fed_before']:.0f} / {r['fed_shared']:.0f} | {cell(rate.get('lm-eval'), '.1f')} | "
            f"{rate['before']:.1f} | {rate['shared']:.1f} | "
            f"{ratio(r.get('shared_vs_lmeval'))} | {r['shared_vs_before']:.2f}x | "
            f"{r['max_rel_diff_vs_before']:.1e} / {cell(r.get('max_rel_diff_vs_lmeval'), '.1e')} | "
            f"{cell(r.get('max_abs_diff_vs_lmeval'), '.1e')} | {'yes' if same else 'NO'} | "
            f"{per_path(r.get('gflop_per_request'), '.2f')} | "
            f"{per_path(r.get('gflop_per_s'), '.0f')} |"
        )
    return "\n".join(lines) + "\n"


def profile(model, instances, args) -> None:
    """Where the shared path's time goes: operators by self CPU (or CUDA) time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    ours(model, instances, args, shared=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with torch_profile(activities=activities) as p:
        ours(model, instances, args, shared=True)
    sort = "self_cuda_time_total" if args.device == "cuda" else "self_cpu_time_total"
    print(p.key_averages().table(sort_by=sort, row_limit=15))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_python = os.environ.get("CATWALK_LMEVAL_PYTHON", str(BENCH / ".venv-lmeval/bin/python"))
    parser.add_argument("--lmeval-python", default=default_python)
    parser.add_argument("--data-root", type=Path, default=default_data_root())
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/catwalk_scoring_bench"))
    parser.add_argument("--models", default="gpt2-small,tiny")
    parser.add_argument("--tokenizer", choices=["neox", "trained"], default="neox")
    parser.add_argument("--tasks", default="piqa,hellaswag,arc_easy,mmlu")
    parser.add_argument("--per-task", type=int, default=64, help="docs per task (MMLU: total)")
    parser.add_argument(
        "--limit", type=int, default=None, help="score N docs per task, spread evenly"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--results-name", default="scoring")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--no-lmeval",
        action="store_true",
        help="time only catwalk's two paths (a machine without lm-eval; needs requests.json "
        "and corpus.txt already in --work-dir)",
    )
    args = parser.parse_args()
    if args.no_lmeval:
        args.lmeval_python = None
    elif not Path(args.lmeval_python).exists():
        raise SystemExit(
            f"scoring bench: no lm-eval python at {args.lmeval_python}; make one with the "
            "command in bench/results/scoring.md, or pass --lmeval-python"
        )
    return args


def main() -> None:
    args = parse_args()
    requests_path = build_requests(args.lmeval_python, args.data_root, args.work_dir, args.per_task)
    tasks = load_requests(requests_path)
    directories = build_models(args.work_dir, args.tokenizer)
    results_file = RESULTS / f"{args.results_name}.json"
    saved = json.loads(results_file.read_text()) if results_file.exists() else {}
    rows = saved.get("results", {})
    for model_name in args.models.split(","):
        model = RankClassifier.from_directory(directories[model_name]).to(args.device)
        lm_eval = None if args.profile or args.no_lmeval else LmEval(
            args.lmeval_python, requests_path, directories[model_name], args.batch_size,
            args.device,
        )  # fmt: skip
        for task in args.tasks.split(","):
            picks = spread(len(tasks[task]), args.limit)
            docs = [tasks[task][k] for k in picks]
            instances = [
                MultipleChoiceInstance(d["context"], tuple(d["continuations"]), d["label"])
                for d in docs
            ]
            print(f"{model_name} / {task}: {len(instances)} docs", flush=True)
            if args.profile:
                profile(model, instances, args)
                continue
            rows[f"{model_name}/{task}"] = measure(lm_eval, model, task, picks, instances, args)
            print(json.dumps(rows[f"{model_name}/{task}"], indent=1), flush=True)
            payload = {"machine": machine(), "args": {**vars(args)}, "results": rows}
            payload["args"] = {k: str(v) for k, v in payload["args"].items()}
            write_results(args.results_name, payload, table(rows, args.results_name))
        if lm_eval is not None:
            lm_eval.close()


if __name__ == "__main__":
    sys.exit(main())
