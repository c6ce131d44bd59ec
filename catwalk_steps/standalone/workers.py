"""What each worker of an evaluation on several devices does: score its share of the instances
and write the scores as JSON, for the process that launched it to put together.

Shares: the instances sorted by size (characters of every context and choice), dealt out in
turn, so that every rank gets as many as the others (at most one fewer) and as long ones.

- Without an engine block each worker scores its share on a whole copy of the model, batched by
  length as on one device (`score_choices`); no collective runs, so ranks finish when they do.
- With one (FSDP2, FairScale FSDP, DDP) the engine builds the model and shards it, and every
  rank runs the same number of forwards through the engine's root wrapper, as sharded engines
  need (each forward gathers parameters from every rank): shares are padded with zero-weight
  stand-ins to the same length and batched by instance count. The scores are the model's
  `scores` output, the same forward that training validates with.

Either way each instance is scored exactly once, on one rank, so the metrics computed from the
merged scores are exact.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import torch
from tango.common import Lazy, Params
from tango.integrations.torch import Optimizer

from ..engines.base import default_cpu_threads
from ..engines.scorer import engine_scorer
from ..engines.throughput import peak_memory_mib
from ..engines.train_config import NodeAwareTrainConfig
from ..files import write_json_atomic
from ..kinds import MultipleChoiceCollator, Padding, kind_of
from ..settings import Precision
from .job import EvaluationJob

SCORES_DIR = "scores"
# Tango's engines build an optimizer with the model; evaluation never steps it. SGD without
# momentum keeps no state, so it costs no memory.
NO_OPTIMIZER = Params({"type": "torch::SGD", "lr": 0.0})


def share_of(instances: list[Any], rank: int, world_size: int) -> list[int]:
    """The indices of the instances `rank` scores."""
    order = sorted(range(len(instances)), key=lambda i: (-instance_size(instances[i]), i))
    return order[rank::world_size]


def instance_size(instance: Any) -> int:
    return sum(len(context) + len(choice) for context, choice in instance.pairs())


def scores_file(work_dir: Path, rank: int) -> Path:
    return Path(work_dir) / SCORES_DIR / f"rank{rank:04d}.json"


def clear_scores(work_dir: Path) -> None:
    """What an earlier, interrupted attempt of the step left."""
    shutil.rmtree(Path(work_dir) / SCORES_DIR, ignore_errors=True)


def score_share(job: EvaluationJob, rank: int, local_rank: int) -> None:
    """One worker's work: its share scored, written to its scores file."""
    mine = share_of(job.instances, rank, job.world_size)
    start = resident_mib()
    if job.engine is None:
        scores = replica_scores(job, mine, job.devices.device(local_rank), show=rank == 0)
    else:
        scores = engine_scores(job, mine, rank, local_rank)
    path = scores_file(job.work_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    share = {
        "indices": mine,
        "scores": scores,
        "peak_memory_mib": peak_memory_mib(job.devices.device(local_rank)),
        "start_memory_mib": start,  # this process before the model (its imports, its data)
    }
    write_json_atomic(path, share)


def resident_mib() -> float:
    """This process's resident memory now (Linux), in MiB; 0 where it cannot be read."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0.0
    line = next((row for row in status.splitlines() if row.startswith("VmRSS:")), "VmRSS: 0")
    return int(line.split()[1]) / 1024


def replica_scores(
    job: EvaluationJob, mine: list[int], device: torch.device, show: bool
) -> list[list[float]]:
    """The share scored on this worker's own whole copy of the model."""
    if device.type == "cpu":
        torch.set_num_threads(default_cpu_threads(job.local_world_size))
    model = job.model.construct()
    model.to(device)
    precision = Precision.parse(job.precision, "evaluate.precision")
    instances = [job.instances[i] for i in mine]
    options = {"batch_size": job.batch_size, "max_length": job.max_length, "device": device}
    options.update(precision=precision, progress=show)
    return kind_of(job.instances).answers(model, instances, options)


def engine_scores(job: EvaluationJob, mine: list[int], rank: int, local_rank: int) -> list[Any]:
    """The share scored through the engine's root forward, as many forwards as every rank."""
    assert job.engine is not None
    engine = job.engine.construct(
        train_config=evaluation_config(job, rank, local_rank),
        model=job.model,
        optimizer=Lazy(Optimizer, NO_OPTIMIZER.duplicate()),
    )
    per_rank = math.ceil(len(job.instances) / job.world_size)
    stand_in = Padding(job.instances[mine[0] if mine else 0])
    items: list[Any] = [job.instances[i] for i in mine]
    items += [stand_in] * (per_rank - len(items))
    kind = kind_of(job.instances)
    per_batch = max(1, job.batch_size // kind.widest(job.instances))
    # pmi_dc's unconditioned instances are among the instances (catwalk::evaluate).
    collate = MultipleChoiceCollator(job.tokenizer, job.max_length)
    collate.unconditioned_rows = False
    engine.model.eval()
    scorer = engine_scorer(engine, job.world_size > 1)
    answers: list[Any] = []
    for start in range(0, per_rank, per_batch):
        batch = items[start : start + per_batch]
        instances = [item.instance if isinstance(item, Padding) else item for item in batch]
        rows = kind.batch_answers(scorer, collate(batch), instances)
        answers += [
            row for item, row in zip(batch, rows, strict=True) if not isinstance(item, Padding)
        ]
    return answers


def evaluation_config(job: EvaluationJob, rank: int, local_rank: int) -> NodeAwareTrainConfig:
    """Tango's view of this worker, as an engine asks for it."""
    return NodeAwareTrainConfig.of_worker(job, rank, local_rank)


def merged_scores(job: EvaluationJob) -> tuple[list[list[float]], list[float]]:
    """Every instance's scores, in input order, from the workers' files (each instance once),
    and each rank's peak memory (MiB: the CUDA allocator's on a GPU, the process's on a CPU)."""
    scores: list[list[float] | None] = [None] * len(job.instances)
    peaks = []
    for rank in range(job.world_size):
        share = json.loads(scores_file(job.work_dir, rank).read_text())
        peaks.append(share["peak_memory_mib"])
        for index, row in zip(share["indices"], share["scores"], strict=True):
            if scores[index] is not None:
                raise RuntimeError(f"evaluation: instance {index} was scored twice")
            scores[index] = row
    missing = [i for i, row in enumerate(scores) if row is None]
    if missing:
        raise RuntimeError(f"evaluation: {len(missing)} instances were not scored ({missing[:5]})")
    return scores, peaks  # type: ignore[return-value]
