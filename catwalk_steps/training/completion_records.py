"""GRPO's completion records (issue 59): what each logged step sampled and how it was scored,
one record per completion, data only (JSON), as an evaluation keeps one record per document
(:mod:`catwalk_steps.metrics.records`):

    {"step": 1, "rank": 0, "prompt": "...", "completion": "...", "rewards": {"task_metric": 1.0},
     "reward": 1.0, "advantage": 0.87, "tokens": 5, "truncated": false}

`rewards` holds each reward's value (null where it answered "none"), `reward` their weighted sum
(null: none answered), `advantage` what the loss weighed the completion by, `completion` the
text the rewards scored (cut at the task's stop sequences). Rank 0 writes a step's records, every
rank's after the gather, as JSON lines to `completions/step_<n>.jsonl` in the training step's
work directory (n: the 1-based step, as the metric history counts), written whole or not at all;
a run resumed before a step writes that step's file again, the same.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..distributed.exchange import gather_data
from ..files import write_atomic
from ..objectives.grpo_loss import weighted_rewards
from ..rewards import RewardSettings

COMPLETIONS_DIR = "completions"  # in the training step's work directory


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def completion_records(
    step: int,
    rank: int,
    prompts: Sequence[str],
    texts: Sequence[str],
    table: torch.Tensor,
    rewards: RewardSettings,
    advantages: torch.Tensor,
) -> list[dict[str, Any]]:
    """One record per completion (see the module): `prompts` and `texts` one per completion,
    `table` their rows of rewards, length and truncation ([completions, rewards + 2]),
    `rewards` the settings that scored them."""
    names, weighted = rewards.names, weighted_rewards(table[:, :-2], rewards.weights)
    records = []
    for i, (prompt, text) in enumerate(zip(prompts, texts, strict=True)):
        row = table[i].tolist()
        records.append(
            {
                "step": step + 1,
                "rank": rank,
                "prompt": prompt,
                "completion": text,
                "rewards": {name: _number(v) for name, v in zip(names, row[:-2], strict=True)},
                "reward": _number(float(weighted[i])),
                "advantage": float(advantages[i]),
                "tokens": int(row[-2]),
                "truncated": bool(row[-1]),
            }
        )
    return records


def write_completion_records(work_dir: Path, step: int, records: Sequence[dict[str, Any]]) -> Path:
    """The step's records as JSON lines, written whole (see the module); their file."""
    path = Path(work_dir) / COMPLETIONS_DIR / f"step_{step + 1}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(record, allow_nan=False) + "\n" for record in records)
    write_atomic(path, lambda p: p.write_text(lines))
    return path


def written_by_rank_0(
    work_dir: Path, step: int, records: list[dict[str, Any]], world_size: int, device: Any
) -> None:
    """Every rank's `records` of the step, gathered and written by rank 0. Collective."""
    everyone = [records] if world_size == 1 else gather_data(records, 0, device)
    if everyone is not None:  # rank 0
        write_completion_records(work_dir, step, [r for part in everyone for r in part])
