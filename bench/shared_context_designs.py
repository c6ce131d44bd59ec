"""Benchmark: the two shared-context designs the issue names, on the same requests.

    python bench/shared_context_designs.py [--tasks hellaswag,piqa,mmlu] [--docs 48]

- `packed`: what catwalk ships (`score_choices`): one forward over rows holding each context
  once and every continuation after it, with a 4D mask and position ids.
- `kv-cache`: the context run once with `use_cache=True` (left-padded, so every context ends at
  the same column), its key/value cache expanded over the choices (`batch_select_indices`),
  then a second forward over the continuations (right-padded) against that cache.

Both on the bench's GPT-2-small-shaped model (built by `bench/scoring.py`), float32, batch 32
sequences, longest questions first; best of `--repeats`. The kv-cache scores are checked
against the packed ones, so the comparison is between two right answers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from common import REPO, machine, write_results

sys.path.insert(0, str(REPO))

from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.sequences import SequenceEncoder
from catwalk_steps.tasks.base import MultipleChoiceInstance

MAX_LENGTH = 1024


def kv_cache_batch(lm, contexts, continuations, owners, pad_id) -> torch.Tensor:
    """Scores of the (context owners[k], continuations[k]) pairs: context forward, cache
    expanded over the choices, continuation forward."""
    width = max(map(len, contexts))
    ids = torch.tensor([[pad_id] * (width - len(c)) + list(c) for c in contexts])
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    out = lm(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    first = out.logits[:, -1].float().log_softmax(-1)  # predicts every choice's first token
    cache = out.past_key_values
    index = torch.tensor(owners)
    cache.batch_select_indices(index)
    fed = max(len(c) - 1 for c in continuations)
    scores = torch.tensor(
        [float(first[o, c[0]]) for o, c in zip(owners, continuations, strict=True)]
    )
    if fed == 0:  # one-token choices: the context's forward scored them all
        return scores
    cont = torch.tensor([list(c[:-1]) + [pad_id] * (fed + 1 - len(c)) for c in continuations])
    cont_mask = torch.tensor([[1] * (len(c) - 1) + [0] * (fed + 1 - len(c)) for c in continuations])
    lengths = mask.sum(1)[index]
    logits = lm(
        input_ids=cont,
        attention_mask=torch.cat([mask[index], cont_mask], dim=1),
        position_ids=lengths[:, None] + torch.arange(fed)[None],
        past_key_values=cache,
        use_cache=True,
    ).logits
    for k, c in enumerate(continuations):
        if len(c) > 1:
            lp = logits[k, : len(c) - 1].float().log_softmax(-1)
            scores[k] += lp.gather(-1, torch.tensor(c[1:])[:, None]).sum()
    return scores


def kv_cache_scores(model, instances, batch_size) -> list[list[float]]:
    sequences = SequenceEncoder(model.tokenizer, MAX_LENGTH).sequences(instances)
    by_instance: dict[int, list] = {}
    for s in sequences:
        by_instance.setdefault(s.instance, []).append(s)
    order = sorted(by_instance.values(), key=lambda g: -max(len(s.token_ids) for s in g))
    scores = [[0.0] * len(i.choices) for i in instances]
    batch: list[list] = []
    for group in order + [None]:
        if group is None or sum(map(len, batch)) + len(group) > batch_size:
            contexts = [g[0].token_ids[: -g[0].continuation_length] for g in batch]
            flat = [(b, s) for b, g in enumerate(batch) for s in g]
            conts = [s.token_ids[-s.continuation_length :] for _, s in flat]
            with torch.no_grad():
                values = kv_cache_batch(
                    model.lm, contexts, conts, [b for b, _ in flat], model.tokenizer.pad_token_id
                )
            for (_, s), v in zip(flat, values.tolist(), strict=True):
                scores[s.instance][s.choice] = v
            batch = []
        if group is not None:
            batch.append(group)
    return scores


def timed(fn, repeats) -> tuple[float, list]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/catwalk_scoring_bench"))
    parser.add_argument("--tasks", default="hellaswag,piqa,mmlu")
    parser.add_argument("--docs", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    tasks = json.loads((args.work_dir / "requests.json").read_text())
    model = RankClassifier.from_directory(args.work_dir / "models" / "gpt2-small").eval()
    rows = {}
    for task in args.tasks.split(","):
        instances = [
            MultipleChoiceInstance(d["context"], tuple(d["continuations"]), d["label"])
            for d in tasks[task][: args.docs]
        ]
        requests = sum(len(i.choices) for i in instances)
        kv_cache_scores(model, instances[:4], 32)  # warm-up
        packed_s, packed = timed(
            lambda chosen=instances: score_choices(model, chosen, 32, MAX_LENGTH, progress=False),
            args.repeats,
        )
        cache_s, cached = timed(
            lambda chosen=instances: kv_cache_scores(model, chosen, 32), args.repeats
        )
        diff = max(
            abs(x - y)
            for a, b in zip(packed, cached, strict=True)
            for x, y in zip(a, b, strict=True)
        )
        rows[task] = {
            "docs": len(instances),
            "packed_req_s": requests / packed_s,
            "kv_cache_req_s": requests / cache_s,
            "max_abs_diff": diff,
        }
        print(task, json.dumps(rows[task]), flush=True)
    lines = [
        "Shared-context designs, GPT-2-small shape, float32, batch 32, CPU "
        f"({machine().get('cpu_threads', '?')} threads): requests/s, best of {args.repeats}.",
        "",
        "| task | docs | packed rows | kv-cache expanded | packed / kv-cache | max abs diff |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for task, r in rows.items():
        lines.append(
            f"| {task} | {r['docs']} | {r['packed_req_s']:.1f} | {r['kv_cache_req_s']:.1f} | "
            f"{r['packed_req_s'] / r['kv_cache_req_s']:.2f}x | {r['max_abs_diff']:.1e} |"
        )
    write_results(
        "shared_context_designs", {"machine": machine(), "results": rows}, "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    main()
