"""Benchmark: data at real size, through `tango run`, against TRL's own preparation.

    python bench/data_scale.py --rows 10000 100000 1000000 [--forms sft_text,sft_chat,preference]
        [--trl-python /work/trl-venv/bin/python] [--data /tmp/catwalk-data-scale]

Generated files of N rows (a prompt of 40-80 words and answers of 10-30, as issue 56 measured;
OLMo's BPE tokenizer, 50k tokens, max_length 512), in three of TRL's forms: prompt-completion
text (`sft_text`), conversational prompt-completion (`sft_chat`, rendered by a chat template
given with the model block's `chat_template`) and preference pairs (`preference`, DPO with a
LoRA adapter: its reference is the base with the adapter off, so no reference step runs). Each
through `tango run` of a file this script writes (`lib.pipeline` / `lib.preference`, a tiny
GPT-2 of the tokenizer's vocabulary, 2 CPU processes), in a workspace of its own:

- cold load: `-s <data>` in a new workspace (the file read, checked, stored as Arrow);
- tokenized once + first steps: `-s <trained>`, 2 training steps (the tokens computed cold on
  every core, then the workers start and train);
- from `tango run` to its first training step with everything cached: the same with another
  seed (a new training step, the same stored rows and tokens), until the first step's loss is
  logged (and the whole command's wall time);
  (`--first-step-only`: this measurement alone again, in the workspaces a run left);
- cached re-read: opening the stored split in a fresh process (the package imported) and
  reading a row;
- per-rank peak memory of the cached run (its run card: each rank's peak RSS);
- TRL 1.16 on the same file (`bench/trl_prepare.py` in a throwaway venv): `load_dataset` and
  the trainer's preparation (tokenization; packing for SFT where packed), 2 processes.

Results in bench/results/data_scale.{json,md} (a run replaces the rows of the sizes and forms
it ran, keeping the others); docs/results.md quotes the table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, write_results
from tokenize_once import WORDS as TOKENIZE_ONCE_WORDS

TOKENIZER = "olmo_eval::gpt-neox-olmo-dolma-v1_5"
MAX_LENGTH = 512
WORDS = TOKENIZE_ONCE_WORDS[:73]  # its first 73 words: the generated files are made of these
CHAT_TEMPLATE = (  # bench/trl_prepare.py's: the same rendering on both sides
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize()


def row(form: str, rng: random.Random) -> dict:
    prompt, answer = sentence(rng, 40, 80) + "?", sentence(rng, 10, 30)
    if form == "sft_text":
        return {"prompt": prompt, "completion": " " + answer}
    if form == "sft_chat":
        return {
            "prompt": [{"role": "user", "content": prompt}],
            "completion": [{"role": "assistant", "content": answer}],
        }
    return {"prompt": prompt, "chosen": " " + answer, "rejected": " " + sentence(rng, 10, 30)}


def generated(form: str, rows: int, path: Path, seed: int = 0) -> Path:
    """`rows` rows of `form` in `path` (written once: a file of that name is reused)."""
    if not path.is_file():
        rng = random.Random(seed)
        temporary = path.with_suffix(".tmp")
        with temporary.open("w") as f:
            for _ in range(rows):
                f.write(json.dumps(row(form, rng)) + "\n")
        temporary.rename(path)
    return path


def experiment(form: str, train: Path, validation: Path, seed: int) -> str:
    """The jsonnet of one run on the file: `lib.pipeline` (SFT) or `lib.preference` (DPO with
    a LoRA adapter), a tiny GPT-2 of the tokenizer's vocabulary, 2 CPU processes, 2 steps."""
    model = {
        "type": "catwalk::rank_classifier",
        "tokenizer": TOKENIZER,
        "config": {
            "model_type": "gpt2",
            "n_layer": 2,
            "n_embd": 64,
            "n_head": 4,
            "n_positions": MAX_LENGTH,
            "vocab_size": 50304,
        },
        "chat_template": CHAT_TEMPLATE,
    }
    files = {"train": str(train), "validation": str(validation)}
    training = {
        "train_steps": 2,
        "validate_every": 2,
        "checkpoint_every": 2,
        "log_every": 1,
        "batch_size": 8,
        "max_length": MAX_LENGTH,
        "seed": seed,
        "device_count": 2,
    }
    if form == "preference":
        task = {
            "type": "catwalk::preference",
            "name": "pairs",
            "source": "files",
            "data_files": files,
        }
        model["adapter"] = {"type": "lora", "r": 8}
        call = "lib.preference(task, model, lib.engines.torch(), training)"
    else:
        task = {
            "type": "catwalk::generative",
            "name": "sft",
            "source": "files",
            "data_files": files,
            "target_delimiter": "",
            "until": [],
            "max_gen_toks": 64,
        }
        if form == "sft_text":
            task.update(doc_to_text="prompt", doc_to_target="completion")
        else:
            task.update(
                doc_to_text="{{prompt[-1].content}}",
                doc_to_target="{{completion[0].content}}",
                apply_chat_template=True,
                until=["<|end|>"],
            )
        call = "lib.pipeline(task, model, lib.engines.torch(), training)"
    return (
        "local lib = import 'lib/pipeline.libsonnet';\n"
        f"local task = {json.dumps(task)};\nlocal model = {json.dumps(model)};\n"
        f"local training = lib.training.demo + {json.dumps(training)};\n{call}\n"
    )


MARKS = {  # what a line says -> when it was first seen
    "started": "Starting step",
    "finished": "Finished step",
    "first_step": "batch_loss=",
}


def tango(experiment_file: Path, workspace: Path, step: str) -> tuple[dict[str, float], str]:
    """`tango run -s step` as a user types it (file-friendly logging: a line per progress
    update), its output read as it comes: the seconds from the command's start to the first
    line of each of :data:`MARKS` (the first step started, one finished, the first training
    loss logged) and to its end (`wall`), and its output (it must succeed)."""
    tango_path = str(Path(sys.executable).with_name("tango"))
    argv = [tango_path, "--file-friendly-logging", "run", str(experiment_file)]
    argv += ["-w", str(workspace), "-s", step]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    seen: dict[str, float] = {}
    lines = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env
    ) as command:
        assert command.stdout is not None
        for line in command.stdout:
            lines.append(line)
            for mark, text in MARKS.items():
                if mark not in seen and text in line:
                    seen[mark] = time.perf_counter() - start
    seen["wall"] = time.perf_counter() - start
    output = "".join(lines)
    if command.returncode != 0:
        raise RuntimeError(f"{argv}: {output[-3000:]}")
    return seen, output


def step_dir(workspace: Path, prefix: str) -> Path:
    """The newest result directory of a step class in the workspace's cache."""
    return max((workspace / "cache").glob(f"{prefix}-*"), key=lambda p: p.stat().st_mtime)


def cached_read(workspace: Path) -> float:
    """Seconds, in a fresh process (the package imported first), to open the stored training
    split, check it and read a row."""
    code = (
        "import time, sys\n"
        "from catwalk_steps.workspace.formats import InstancesFormat\n"
        "t = time.perf_counter()\n"
        f"data = InstancesFormat().read({str(step_dir(workspace, 'LoadTask'))!r})\n"
        "split = data['train']; row = split[len(split) // 2]\n"
        "print(time.perf_counter() - t)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    return float(done.stdout.strip().splitlines()[-1])


def tokenize_seconds(output: str) -> float:
    """The seconds the training step's `Tokenized N rows once in S s` lines say (each split it
    tokenized: the training split, the validation split)."""
    return sum(float(s) for s in re.findall(r"Tokenized \d+ rows once in ([0-9.]+) s", output))


def rank_peaks(workspace: Path) -> list[float]:
    """Each rank's peak memory (MiB) over the cached run's logged steps, from its model's
    metric history."""
    info = json.loads(
        (step_dir(workspace, "TrainRankClassifier") / "catwalk_model.json").read_text()
    )
    peaks: dict[str, float] = {}
    for entry in info["metrics_history"]["train"]:
        for rank, mib in (entry.get("peak_memory_mib") or {}).items():
            peaks[rank] = max(peaks.get(rank, 0.0), mib)
    return [peaks[rank] for rank in sorted(peaks)]


def ours(form: str, path: Path, validation: Path, work: Path) -> dict:
    workspace = work / f"ws_{path.stem}"
    data, trained = ("dpo_data", "dpo_trained") if form == "preference" else ("data", "trained")
    first, again = work / f"{path.stem}_seed1.jsonnet", work / f"{path.stem}_seed2.jsonnet"
    first.write_text(experiment(form, path, validation, 1))
    again.write_text(experiment(form, path, validation, 2))
    load, _ = tango(first, workspace, data)
    tokenize_and_train, output = tango(first, workspace, trained)
    cached, _ = tango(again, workspace, trained)
    return {
        "load_command_s": load["wall"],
        "load_s": load["finished"] - load["started"],  # the step itself
        "tokenize_s": tokenize_seconds(output),
        "tokenized_and_2_steps_s": tokenize_and_train["wall"],
        "cached_to_first_step_s": cached["first_step"],
        "cached_run_to_2_steps_s": cached["wall"],
        "cached_read_s": cached_read(workspace),
        "rank_peak_mib": rank_peaks(workspace),
    }


def first_step_again(form: str, path: Path, validation: Path, work: Path) -> dict:
    """The cached measurement alone, on a workspace an earlier run left: a new seed (a new
    training step on the same stored rows and tokens), to its first logged loss."""
    trained = "dpo_trained" if form == "preference" else "trained"
    again = work / f"{path.stem}_again.jsonnet"
    again.write_text(experiment(form, path, validation, random.randrange(3, 10**9)))
    cached, _ = tango(again, work / f"ws_{path.stem}", trained)
    return {
        "cached_to_first_step_s": cached["first_step"],
        "cached_run_to_2_steps_s": cached["wall"],
    }


def trl(form: str, path: Path, python: str, packing: bool) -> dict:
    tokenizer = REPO / ".venv" / "lib" / "python3.11" / "site-packages" / "olmo_eval" / "tokenizers"
    argv = [
        python,
        str(REPO / "bench" / "trl_prepare.py"),
        str(path),
        "--form",
        form,
        "--tokenizer",
        str(tokenizer / "allenai_gpt-neox-olmo-dolma-v1_5.json"),
        "--max-length",
        str(MAX_LENGTH),
        *(["--packing"] if packing else []),
    ]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = [
        "| form | rows | load step s (its command) | tokenize s | cold: load + tokenize s "
        "| TRL: load_dataset + prepare s | cold / TRL | tokenize + 2 steps: `tango run` s "
        "| cached: `tango run` to its first step s | cached re-read s | rank peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ours = r["ours"]
        trl_s = r["trl"]["load_s"] + r["trl"]["prepare_s"]
        cold = ours["load_s"] + ours["tokenize_s"]
        peaks = " / ".join(f"{p:.0f}" for p in ours["rank_peak_mib"])
        lines.append(
            f"| {r['form']} | {r['rows']:,} | {ours['load_s']:.1f} ({ours['load_command_s']:.1f}) "
            f"| {ours['tokenize_s']:.1f} "
            f"| {cold:.1f} | {trl_s:.1f} | {cold / trl_s:.2f} "
            f"| {ours['tokenized_and_2_steps_s']:.1f} | {ours['cached_to_first_step_s']:.1f} "
            f"| {ours['cached_read_s']:.3f} | {peaks} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--forms", default="sft_text,sft_chat,preference")
    parser.add_argument("--data", type=Path, default=Path("/tmp/catwalk-data-scale"))
    parser.add_argument("--trl-python", default="/work/trl-venv/bin/python")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument(
        "--first-step-only",
        action="store_true",
        help="only the cached run to its first step again, in the workspaces an earlier run left",
    )
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    results = earlier_results()
    for rows in args.rows:
        for form in args.forms.split(","):
            path = generated(form, rows, args.data / f"{form}_{rows}.jsonl")
            validation = generated(form, 64, args.data / f"{form}_64.jsonl", seed=1)
            if args.generate_only:
                continue
            if args.first_step_only:
                again = first_step_again(form, path, validation, args.data)
                results[(form, rows)]["ours"].update(again)
                print(form, rows, json.dumps(again), flush=True)
                ordered = sorted(results.values(), key=lambda r: (r["rows"], r["form"]))
                write_results("data_scale", {"results": ordered}, table(ordered))
                continue
            result = {"form": form, "rows": rows, "ours": ours(form, path, validation, args.data)}
            result["trl"] = trl(form, path, args.trl_python, packing=False)
            results[(form, rows)] = result
            print(json.dumps(result), flush=True)
            ordered = sorted(results.values(), key=lambda r: (r["rows"], r["form"]))
            write_results("data_scale", {"results": ordered}, table(ordered))


def earlier_results() -> dict[tuple[str, int], dict]:
    """The rows of an earlier run (bench/results/data_scale.json), which this run's replace
    form by form: the sizes can be run one at a time."""
    path = REPO / "bench" / "results" / "data_scale.json"
    found = json.loads(path.read_text())["results"] if path.is_file() else []
    return {(r["form"], r["rows"]): r for r in found if "cached_to_first_step_s" in r["ours"]}


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
