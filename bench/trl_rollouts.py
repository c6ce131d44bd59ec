"""TRL's side of bench/rlvr.py, run in TRL's venv (torch, transformers, trl 1.16.0): a real
`GRPOTrainer` (no vLLM, on the CPU) built on the model directory, and its own generation of a
batch (`_generate_single_turn`: each prompt repeated G times, left-padded, one `generate` call
with the trainer's `GenerationConfig`, each completion cut after its first end-of-text token),
timed around that call (wall and this process's CPU seconds), after one untimed warm-up call
on the first prompt.

    python bench/trl_rollouts.py --model DIR --prompts prompts.json --out out.json

`prompts.json`: {"prompts": [[token ids]...], "num_generations", "max_completion_length",
"temperature", "top_p", "top_k", "threads"}. Writes the seconds, the completion tokens and the
sampling the trainer's generation config holds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer


def zero_reward(completions, **kwargs):
    return [0.0 for _ in completions]


def trainer(directory: str, asked: dict, out_dir: str) -> GRPOTrainer:
    G = asked["num_generations"]
    config = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        report_to=[],
        num_generations=G,
        per_device_train_batch_size=G * len(asked["prompts"]),
        max_completion_length=asked["max_completion_length"],
        temperature=asked["temperature"],
        top_p=asked["top_p"],
        top_k=asked["top_k"],
        seed=asked.get("seed", 0),
    )
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    data = Dataset.from_dict({"prompt": ["a"] * G})
    return GRPOTrainer(
        model=model,
        reward_funcs=zero_reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.prompts) as f:
        asked = json.load(f)
    torch.set_num_threads(asked["threads"])
    torch.manual_seed(asked.get("seed", 0))
    G = asked["num_generations"]
    with tempfile.TemporaryDirectory() as out_dir:
        grpo = trainer(args.model, asked, out_dir)
        grpo.model.eval()
        repeated = [list(p) for p in asked["prompts"] for _ in range(G)]  # RepeatSampler's batch
        grpo._generate_single_turn(repeated[:G], None, {}, G)  # warm-up
        started, cpu = time.perf_counter(), time.process_time()
        completions, _ = grpo._generate_single_turn(repeated, None, {}, G)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    config = grpo.generation_config
    out = {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "lengths": [len(c) for c in completions],
        "eos_token_ids": list(grpo.eos_token_ids),
        "generation_config": {
            key: getattr(config, key)
            for key in ("do_sample", "temperature", "top_p", "top_k", "min_p", "max_new_tokens")
        },
        "threads": torch.get_num_threads(),
    }
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
