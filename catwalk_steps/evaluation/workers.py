"""What each worker of an evaluation on several devices does: score its chunks of the requests
and write each chunk's answers to the evaluation's records (:mod:`.journal`), for the process
that launched it to put together.

Chunks: the requests sorted by size (characters of every context and choice) and cut every few
batches, the same cut whatever the device count; the chunks still to score are dealt out in
turn, so that every rank gets as many as the others (at most one fewer) and as long ones.

- Without an engine block each worker scores its chunks on a whole copy of the model, batched
  by length as on one device (`score_choices`); no collective runs, so ranks finish when they do.
- With one (FSDP2, FairScale FSDP, DDP) the engine builds the model and shards it, and every
  rank runs the same number of forwards through the engine's root wrapper, as sharded engines
  need (each forward gathers parameters from every rank): chunks are padded with zero-weight
  stand-ins to the same length, a rank short of a chunk scores one of stand-ins only, and
  batches hold a fixed number of instances. The scores are the model's `scores` output, the
  same forward that training validates with.

Either way each request is scored exactly once, in one chunk on one rank, so the metrics
computed from the records are exact.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import torch
from tango.common import Lazy, Params, Tqdm
from tango.integrations.torch import Optimizer

from ..engines.base import default_cpu_threads
from ..engines.scorer import engine_scorer
from ..engines.throughput import peak_memory_mib
from ..engines.train_config import NodeAwareTrainConfig
from ..files import write_json_atomic
from ..kinds import Collator, Padding, kind_of
from ..settings import Precision
from .job import EvaluationJob
from .journal import as_data

SCORES_DIR = "scores"
# Tango's engines build an optimizer with the model; evaluation never steps it. SGD without
# momentum keeps no state, so it costs no memory.
NO_OPTIMIZER = Params({"type": "torch::SGD", "lr": 0.0})


def size_order(instances: list[Any]) -> list[int]:
    """The instances' indices, longest first (ties in input order): the order chunks are cut in."""
    return sorted(range(len(instances)), key=lambda i: (-instance_size(instances[i]), i))


def instance_size(instance: Any) -> int:
    return sum(len(context) + len(choice) for context, choice in instance.pairs())


def scores_file(work_dir: Path, rank: int) -> Path:
    return Path(work_dir) / SCORES_DIR / f"rank{rank:04d}.json"


def clear_scores(work_dir: Path) -> None:
    """What an earlier, interrupted attempt of the step left."""
    shutil.rmtree(Path(work_dir) / SCORES_DIR, ignore_errors=True)


def score_share(job: EvaluationJob, rank: int, local_rank: int) -> None:
    """One worker's work: its chunks scored, each written to the records as it is done; then
    its memory figures to its own file."""
    mine = job.todo[rank :: job.world_size]
    start = resident_mib()
    if job.engine is None:
        replica_scores(job, mine, job.devices.device(local_rank), show=rank == 0)
    else:
        engine_scores(job, mine, rank, local_rank)
    path = scores_file(job.work_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    share = {
        "chunks": mine,
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


def replica_scores(job: EvaluationJob, mine: list[int], device: torch.device, show: bool) -> None:
    """This worker's chunks scored on its own whole copy of the model."""
    if device.type == "cpu":
        torch.set_num_threads(default_cpu_threads(job.local_world_size))
    model = job.model.construct()
    model.to(device)
    precision = Precision.parse(job.precision, "evaluate.precision")
    options = {"batch_size": job.batch_size, "max_length": job.max_length, "device": device}
    options.update(precision=precision, progress=False)
    kind = kind_of(job.instances)
    for chunk in Tqdm.tqdm(mine, desc="Scoring", disable=not show):
        instances = [job.instances[i] for i in job.journal.chunks[chunk]]
        job.journal.write(chunk, as_data(kind.answers(model, instances, options)))


def engine_scores(job: EvaluationJob, mine: list[int], rank: int, local_rank: int) -> None:
    """This worker's chunks scored through the engine's root forward, as many forwards as
    every rank: each chunk padded to the longest, and a chunk of stand-ins where a rank has
    none left."""
    assert job.engine is not None
    engine = job.engine.construct(
        train_config=evaluation_config(job, rank, local_rank),
        model=job.model,
        optimizer=Lazy(Optimizer, NO_OPTIMIZER.duplicate()),
    )
    chunks = job.journal.chunks
    per_chunk = max(len(chunk) for chunk in chunks)
    kind = kind_of(job.instances)
    per_batch = max(1, job.batch_size // kind.widest(job.instances))
    # pmi_dc's unconditioned instances are among the instances (catwalk::evaluate).
    collate = Collator(job.tokenizer, job.max_length)
    collate.unconditioned_rows = False
    engine.model.eval()
    scorer = engine_scorer(engine, job.world_size > 1)
    stand_in = Padding(job.instances[0])
    rounds = math.ceil(len(job.todo) / job.world_size)
    for turn in Tqdm.tqdm(range(rounds), desc="Scoring", disable=rank != 0):
        chunk = mine[turn] if turn < len(mine) else None
        items: list[Any] = [job.instances[i] for i in chunks[chunk]] if chunk is not None else []
        items += [stand_in] * (per_chunk - len(items))
        answers: list[Any] = []
        for start in range(0, per_chunk, per_batch):
            batch = items[start : start + per_batch]
            instances = [item.instance if isinstance(item, Padding) else item for item in batch]
            rows = kind.batch_answers(scorer, collate(batch), instances)
            answers += [
                row for item, row in zip(batch, rows, strict=True) if not isinstance(item, Padding)
            ]
        if chunk is not None:
            job.journal.write(chunk, as_data(answers))


def evaluation_config(job: EvaluationJob, rank: int, local_rank: int) -> NodeAwareTrainConfig:
    """Tango's view of this worker, as an engine asks for it."""
    return NodeAwareTrainConfig.of_worker(job, rank, local_rank)


def peak_memories(job: EvaluationJob) -> list[float]:
    """Each rank's peak memory (MiB: the CUDA allocator's on a GPU, the process's on a CPU)."""
    return [
        json.loads(scores_file(job.work_dir, rank).read_text())["peak_memory_mib"]
        for rank in range(job.world_size)
    ]
