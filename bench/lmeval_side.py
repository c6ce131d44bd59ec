"""The lm-evaluation-harness half of `bench/scoring.py`; runs in lm-eval's own venv.

    <lm-eval python> bench/lmeval_side.py requests --data-root DIR --out requests.json
    <lm-eval python> bench/lmeval_side.py serve --requests requests.json --model MODEL_DIR \
        --batch-size 32 [--device cuda]        # then one task name per line on stdin

`requests`: lm-eval builds each task's zero-shot requests itself, from its own task YAMLs and
hooks (HellaSwag's preprocessing, MMLU's subject descriptions), reading the offline validation
and test splits (`datasets.load_from_disk` directories) instead of the hub; the bench then feeds
exactly these (context, continuation) strings to catwalk. It also writes every doc's text (the
whole splits, not only the subsample) as a corpus to train the bench's tokenizer on.

`serve`: times lm-eval's Hugging Face backend (`HFLM.loglikelihood`, what `lm_eval --model hf`
runs for multiple-choice tasks) on those requests, after one warm-up batch, and prints the
log-likelihoods and the seconds.

This file imports nothing from catwalk_steps: lm-eval's venv does not have it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MMLU_SUBJECTS = (
    "abstract_algebra",
    "anatomy",
    "astronomy",
    "college_biology",
    "high_school_geography",
)


def task_sources(data_root: Path) -> dict[str, tuple[str, Path, str]]:
    """lm-eval task name -> (bench name, arrow file, split) in the offline data."""
    arrow = "data-00000-of-00001.arrow"
    sources = {
        "piqa": ("piqa", data_root / "piqa/plain_text/validation" / arrow, "validation"),
        "hellaswag": ("hellaswag", data_root / "hellaswag/none/validation" / arrow, "validation"),
        "arc_easy": ("arc_easy", data_root / "ai2_arc/ARC-Easy/validation" / arrow, "validation"),
    }
    for subject in MMLU_SUBJECTS:
        path = data_root / "hails/mmlu_no_train" / subject / "test" / arrow
        sources[f"mmlu_{subject}"] = ("mmlu", path, "test")
    return sources


def load_task(manager, name: str, path: Path, split: str):
    """lm-eval's own config for `name`, reading `split` from a local arrow file.

    Only the data source changes: no training or few-shot split (zero-shot), and the split the
    offline data has is the one evaluated (ARC-Easy: validation instead of lm-eval's test).
    """
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(manager.task_index[name].yaml_path, resolve_func=True)
    config.update(
        dataset_path="arrow",
        dataset_name=None,
        dataset_kwargs={"data_files": {split: str(path)}},
        training_split=None,
        fewshot_split=None,
        validation_split=split if split == "validation" else None,
        test_split=split if split == "test" else None,
    )
    return next(iter(manager.load([config])["tasks"].values()))


def build_requests(args) -> None:
    from lm_eval.tasks import TaskManager

    manager = TaskManager()
    out: dict[str, list[dict]] = {}
    corpus: list[str] = []
    for name, (bench_name, path, split) in task_sources(Path(args.data_root)).items():
        task = load_task(manager, name, path, split)
        task.build_all_requests(rank=0, world_size=1)
        docs: dict[int, dict] = {}
        for instance in task.instances:
            context, continuation = instance.arguments
            doc = docs.setdefault(
                instance.doc_id,
                {
                    "task": name,
                    "doc_id": instance.doc_id,
                    "context": context,
                    "continuations": [],
                    "label": int(task.doc_to_target(instance.doc)),
                },
            )
            assert doc["context"] == context, "one context per doc is what these tasks have"
            doc["continuations"].append(continuation)
            corpus += [context, continuation]
        limit = args.mmlu_per_subject if bench_name == "mmlu" else args.per_task
        chosen = sorted(random.Random(args.seed).sample(sorted(docs), min(limit, len(docs))))
        out.setdefault(bench_name, []).extend(docs[d] for d in chosen)
        print(f"{name}: {len(docs)} docs, {len(chosen)} sampled", flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    Path(args.corpus).write_text("\n".join(dict.fromkeys(corpus)))


def serve(args) -> None:
    """Loads the model once, then scores one task per line read from stdin ("piqa 0,5,10": the
    task and the positions of its docs in requests.json) and prints
    `RESULT {json}` for it: the bench interleaves these runs with its own in one session."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    tasks = json.loads(Path(args.requests).read_text())
    lm = HFLM(
        pretrained=args.model,
        backend="causal",
        device=args.device,
        dtype="float32",
        batch_size=args.batch_size,
    )
    print("READY", flush=True)
    for line in sys.stdin:
        task, picks = line.split()
        docs = [tasks[task][int(k)] for k in picks.split(",")]
        requests = [
            Instance("loglikelihood", {}, (doc["context"], continuation), k)
            for doc in docs
            for k, continuation in enumerate(doc["continuations"])
        ]
        lm.loglikelihood(requests[: args.batch_size], disable_tqdm=True)  # warm-up
        start = time.perf_counter()
        results = lm.loglikelihood(requests, disable_tqdm=True)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        scores, k = [], 0
        for doc in docs:
            scores.append([float(r[0]) for r in results[k : k + len(doc["continuations"])]])
            k += len(doc["continuations"])
        print("RESULT " + json.dumps({"seconds": seconds, "scores": scores}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("requests")
    build.add_argument("--data-root", required=True)
    build.add_argument("--out", required=True)
    build.add_argument("--corpus", required=True)
    build.add_argument("--per-task", type=int, default=100)
    build.add_argument("--mmlu-per-subject", type=int, default=20)
    build.add_argument("--seed", type=int, default=0)
    timing = commands.add_parser("serve")
    timing.add_argument("--requests", required=True)
    timing.add_argument("--model", required=True)
    timing.add_argument("--batch-size", type=int, default=32)
    timing.add_argument("--device", default="cpu")
    args = parser.parse_args()
    build_requests(args) if args.command == "requests" else serve(args)


if __name__ == "__main__":
    main()
