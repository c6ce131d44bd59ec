"""A model's scores for a list of instances: in this process on one device, or on several
local workers (GPUs, else CPU processes), the model whole on each or sharded by an engine."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tango.common import Lazy, Params
from tango.common.util import get_extra_imported_modules
from tango.integrations.torch import TrainingEngine

from ..checks.start_warnings import training_warnings
from ..components import lazy_params
from ..console import announce
from ..distributed.devices import evaluation_device, held_device, plan_devices
from ..kinds import kind_of
from ..launch import run_job
from ..scoring.choices import max_length_of, model_max_length
from ..scoring.tokenization import load_tokenizer
from ..settings import Precision
from .job import EvaluationJob, EvaluationSettings
from .sources import ModelSource
from .workers import clear_scores, merged_scores, score_share


def evaluation_scores(
    source: ModelSource,
    instances: list[Any],
    settings: EvaluationSettings,
    step: Any,
    log: logging.Logger,
) -> tuple[list[list[float]], int]:
    """Each instance's per-choice scores (a generation request: its generated text), in input
    order, and the `max_length` they used.

    `step` gives the workers a work directory and a name (a `catwalk::evaluate` step)."""
    precision = Precision.parse(settings.precision, "evaluate.precision")
    if settings.here:
        device = evaluation_device(settings.device, field="evaluate.device")
        precision.check_device(device.type, "evaluate.precision")
        with held_device(device, settings.device, f"step {step.name}") as where:
            model = source.load()
            model.to(where)
            length = settings.max_length or model_max_length(model)
            options = {"batch_size": settings.batch_size, "max_length": length, "device": where}
            options.update(precision=precision, progress=True)
            return kind_of(instances).answers(model, instances, options), length
    job = evaluation_job(source, instances, settings, step)
    precision.check_device(job.devices.device_type, "evaluate.precision")
    notes = [job.devices.note] if job.devices.note else []
    for warning in notes + training_warnings(
        job.devices.device_type, job.local_world_size, "evaluate"
    ):
        log.warning(warning)
    sharded = f", sharded by {engine_type(settings.engine)}" if settings.engine else ""
    announce(log, "Evaluating on %s%s", job.devices.describe(), sharded)
    clear_scores(job.work_dir)
    run_job(job, score_share)
    scores, peaks = merged_scores(job)
    announce(log, "Peak memory per rank: %s MiB", ", ".join(f"{peak:.0f}" for peak in peaks))
    return scores, job.max_length


def evaluation_job(
    source: ModelSource, instances: list[Any], settings: EvaluationSettings, step: Any
) -> EvaluationJob:
    devices = plan_devices(
        settings.device_count,
        requested=settings.device,
        field="evaluate.device",
        purpose="evaluating",
    )
    tokenizer = source.tokenizer_name()
    length = settings.max_length or max_length_of(
        source.hf_config(), load_tokenizer(tokenizer, "evaluate.model.tokenizer")
    )
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
