"""A model's scores for a list of instances: in this process on one device, or on several
local workers (GPUs, else CPU processes), the model whole on each or sharded by an engine."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tango.common import Lazy, Params, Tqdm
from tango.common.util import get_extra_imported_modules
from tango.integrations.torch import TrainingEngine

from ..checks.start_warnings import training_warnings
from ..components import lazy_params
from ..console import announce
from ..distributed.devices import (
    DevicePlan,
    Lease,
    device_lease,
    evaluation_device,
    held_device,
    plan_devices,
    plan_lease,
)
from ..distributed.rendezvous import rendezvous_settings
from ..kinds import kind_of
from ..launch import run_job
from ..scoring.choices import max_length_of, model_max_length
from ..scoring.tokenization import load_tokenizer
from ..settings import Precision
from .job import EvaluationJob, EvaluationSettings
from .journal import CHUNK_BATCHES, AnswerJournal, JournalKey, as_data, chunks_of, digest
from .sources import ModelSource
from .workers import clear_scores, peak_memories, score_share, size_order


def evaluation_scores(
    source: ModelSource,
    instances: list[Any],
    settings: EvaluationSettings,
    step: Any,
    log: logging.Logger,
) -> tuple[list[Any], int]:
    """Each instance's answer (its per-choice scores, or a generation request's text), in
    input order, and the `max_length` they used. Each chunk of answers is recorded as it is
    scored (:mod:`.journal`), so a rerun after a kill scores only what the records lack.

    `step` gives the workers a work directory and a name (a `catwalk::evaluate` step)."""
    precision = Precision.parse(settings.precision, "evaluate.precision")
    kind = kind_of(instances)
    if settings.here:
        device = evaluation_device(settings.device, field="evaluate.device")
        precision.check_device(device.type, "evaluate.precision")
        with held_device(device, settings.device, f"step {step.name}") as where:
            model = source.load()
            model.to(where)
            length = settings.max_length or model_max_length(model)
            journal = answer_journal(source, instances, settings, step, length, where.type)
            options = {"batch_size": settings.batch_size, "max_length": length, "device": where}
            options.update(precision=precision, progress=journal is None)
            if journal is None:  # a model built in Python: nothing to key records by
                return as_data(kind.answers(model, instances, options)), length
            todo = journal.start(instances, kind.is_answer, log)
            for chunk in Tqdm.tqdm(todo, desc="Scoring", disable=not todo):
                part = [instances[i] for i in journal.chunks[chunk]]
                journal.write(chunk, as_data(kind.answers(model, part, options)))
            return collected(journal, instances, kind), length
    job = evaluation_job(source, instances, settings, step, log)
    precision.check_device(job.devices.device_type, "evaluate.precision")
    notes = [job.devices.note] if job.devices.note else []
    for warning in notes + training_warnings(
        job.devices.device_type, job.local_world_size, "evaluate"
    ):
        log.warning(warning)
    sharded = f", sharded by {engine_type(settings.engine)}" if settings.engine else ""
    announce(log, "Evaluating on %s%s", job.devices.describe(), sharded)
    clear_scores(job.work_dir)
    if job.todo:
        run_job(job, score_share)
        peaks = peak_memories(job)
        announce(log, "Peak memory per rank: %s MiB", ", ".join(f"{peak:.0f}" for peak in peaks))
    return collected(job.journal, instances, kind), job.max_length


def evaluation_lease(settings: EvaluationSettings) -> Lease:
    """The devices :func:`evaluation_scores` will hold for `settings`, said before it runs
    (`catwalk-plan`): one process's device, or this node's share of the workers."""
    if settings.here:
        device = evaluation_device(settings.device, field="evaluate.device")
        return device_lease(device, settings.device)
    return plan_lease(evaluation_devices(settings), settings.num_nodes)


def evaluation_devices(settings: EvaluationSettings) -> DevicePlan:
    """Where this node's `device_count` evaluation workers run."""
    return plan_devices(
        settings.device_count,
        requested=settings.device,
        field="evaluate.device",
        purpose="evaluating",
    )


def collected(journal: AnswerJournal, instances: list[Any], kind: Any) -> list[Any]:
    """The answers as read back from the records (in every run, resumed or not), which are
    then no longer needed."""
    answers = journal.collected(instances, kind.is_answer)
    journal.finish()
    return answers


def answer_journal(
    source: ModelSource,
    instances: list[Any],
    settings: EvaluationSettings,
    step: Any,
    length: int,
    device_type: str,
) -> AnswerJournal | None:
    """The records of this evaluation (None for a model built in Python): chunks cut in size
    order every :data:`CHUNK_BATCHES` batches, keyed by what changes an answer."""
    model = source.fingerprint()
    if model is None:
        return None
    kind = kind_of(instances)
    per_chunk = max(1, settings.batch_size // kind.widest(instances)) * CHUNK_BATCHES
    engine = lazy_params(settings.engine) if settings.engine is not None else None
    scoring: dict[str, Any] = {"batch_size": settings.batch_size, "max_length": length}
    scoring.update(engine=engine, precision=settings.precision, device=device_type)
    scoring.update(per_chunk=per_chunk)
    requests = digest([kind.encode(instance) for instance in instances])
    key = JournalKey(model, requests, json.loads(json.dumps(scoring, default=str)))
    return AnswerJournal(Path(step.work_dir), key, chunks_of(size_order(instances), per_chunk))


def evaluation_job(
    source: ModelSource,
    instances: list[Any],
    settings: EvaluationSettings,
    step: Any,
    log: logging.Logger,
    todo: list[int] | None = None,
) -> EvaluationJob:
    """The job of every worker on every node; `todo`: the chunks node 0 found still to score
    (another node takes them from node 0 rather than reading the records again)."""
    devices = evaluation_devices(settings)
    tokenizer = source.tokenizer_name()
    length = settings.max_length or max_length_of(
        source.hf_config(), load_tokenizer(tokenizer, "evaluate.model.tokenizer")
    )
    journal = answer_journal(source, instances, settings, step, length, devices.device_type)
    assert journal is not None  # a model built in Python is scored here (`model_source`)
    job = EvaluationJob(
        step_id=step.unique_id,
        step_name=step.name,
        work_dir=Path(step.work_dir),
        model=source.lazy(),
        engine=with_precision(settings.engine, settings.precision),
        instances=list(instances),
        batch_size=settings.batch_size,
        max_length=length,
        tokenizer=tokenizer,
        precision=settings.precision,
        devices=devices,
        journal=journal,
        todo=journal.start(instances, kind_of(instances).is_answer, log) if todo is None else todo,
        rendezvous=rendezvous_settings(
            settings.num_nodes,
            settings.master_addr,
            settings.master_port,
            settings.rendezvous_timeout,
            step="evaluate",
        ),
        include_package=tuple(get_extra_imported_modules()),
    )
    return job


def with_precision(
    engine: Lazy[TrainingEngine] | None, precision: str
) -> Lazy[TrainingEngine] | None:
    """The engine block with the step's precision (one precision setting for the step)."""
    if engine is None:
        return None
    params = lazy_params(engine)
    params.setdefault("precision", precision)
    return Lazy(TrainingEngine, Params(params))


def engine_type(engine: Lazy[TrainingEngine]) -> str:
    return str(lazy_params(engine).get("type", "the engine"))
