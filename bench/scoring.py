"""Benchmark: batched, length-sorted scoring against one sequence at a time.

    .venv/bin/python bench/scoring.py [--instances 256] [--batch-size 32] [--repeats 3]

Same model (the demo's tiny GPT-2), same data (the synthetic task's validation split, plus
PIQA-shaped instances of uneven length), scores checked equal; reports instances/s for both
and the ratio, measured in one run (interleaved repeats, best of each).
"""

from __future__ import annotations

import argparse
import time

import torch
from common import demo_model_spec, machine, write_results

from catwalk_steps.scoring.evaluation import evaluating, score_choices
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.tasks.base import MultipleChoiceInstance
from catwalk_steps.tasks.synthetic import SyntheticTask


def one_at_a_time(model: RankClassifier, instances, max_length: int) -> list[list[float]]:
    """The slow baseline: every (context, choice) sequence alone, no padding."""
    from catwalk_steps.scoring.sequences import SequenceEncoder, pad_sequences

    encoder = SequenceEncoder(model.tokenizer, max_length)
    scores = [[0.0] * len(i.choices) for i in instances]
    with evaluating(model):
        for sequence in encoder.sequences(instances):
            t = pad_sequences([sequence], model.tokenizer.pad_token_id)
            score = model.score_sequences(
                t["input_ids"], t["attention_mask"], t["continuation_mask"], t["logits_from"]
            )
            scores[sequence.instance][sequence.choice] = float(score[0])
    return scores


def uneven_instances(count: int) -> list[MultipleChoiceInstance]:
    """PIQA-like lengths: goals and answers of 3 to 40 words."""
    generator = torch.Generator().manual_seed(0)
    words = lambda n: " ".join(["word"] * n)  # noqa: E731
    out = []
    for _ in range(count):
        goal, a, b = (int(x) for x in torch.randint(3, 40, (3,), generator=generator))
        out.append(
            MultipleChoiceInstance(
                f"Question: {words(goal)}\nAnswer:", (" " + words(a), " " + words(b)), 0
            )
        )
    return out


def timed(function, *args) -> tuple[float, list]:
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def compare(model, instances, batch_size, max_length, repeats) -> dict:
    batched_times, loop_times = [], []
    for _ in range(repeats):
        t, batched = timed(
            lambda: score_choices(model, instances, batch_size, max_length, progress=False)
        )
        batched_times.append(t)
        t, looped = timed(one_at_a_time, model, instances, max_length)
        loop_times.append(t)
    worst = max(
        abs(x - y) / max(1.0, abs(y))
        for rb, rl in zip(batched, looped, strict=True)
        for x, y in zip(rb, rl, strict=True)
    )
    assert worst < 1e-5, f"batched scores differ from one-at-a-time scores by {worst}"
    n = len(instances)
    return {
        "instances": n,
        "batched_instances_per_s": n / min(batched_times),
        "one_at_a_time_instances_per_s": n / min(loop_times),
        "speedup": min(loop_times) / min(batched_times),
        "max_relative_score_difference": worst,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    model = RankClassifier(**demo_model_spec())
    data = {
        "synthetic (demo validation)": SyntheticTask(
            seed=1, sizes={"validation": args.instances}
        ).load(["validation"])["validation"],
        "uneven lengths (PIQA-like)": uneven_instances(args.instances),
    }
    rows = {
        name: compare(model, inst, args.batch_size, args.max_length, args.repeats)
        for name, inst in data.items()
    }
    lines = [
        f"Scoring speed, demo model, batch {args.batch_size} sequences, "
        f"{torch.get_num_threads()} CPU threads",
        "",
        "| data | instances | batched inst/s | one-at-a-time inst/s | speedup |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['instances']} | {r['batched_instances_per_s']:.0f} | "
            f"{r['one_at_a_time_instances_per_s']:.0f} | {r['speedup']:.1f}x |"
        )
    write_results(
        "scoring",
        {"machine": machine(), "args": vars(args), "results": rows},
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
