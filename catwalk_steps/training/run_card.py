"""What produced a training, gathered where it runs: the step, its resolved config, the job's
devices, the environment (versions, git commit, host); and, once it ends, what it took.
(`reports.run_card` shows cards under a report's table.)"""

from __future__ import annotations

from typing import Any

from ..environment import environment
from ..reports.tables import training_figures
from .job import TrainingJob


def run_card(job: TrainingJob, config: dict[str, Any] | None) -> dict[str, Any]:
    card = {
        "step": {"name": job.step_name, "unique_id": job.step_id},
        "config": config,
        # What validation measured (the kind's default resolved): what reports plot and name.
        "val_metric_name": job.schedule.val_metric_name,
        "world_size": job.world_size,
        "num_nodes": job.rendezvous.num_nodes,
        "devices": job.devices.describe(),
        "environment": environment(),
    }
    threads = cpu_threads(job)
    if threads is not None:
        card["cpu_threads"] = threads
    trained = what_trains(job.model)
    return card if trained is None else {**card, "trained": trained}


def cpu_threads(job: TrainingJob) -> int | None:
    """Torch threads per CPU worker (the engine's `cpu_threads`, else the default: one, or the
    `OMP_NUM_THREADS` set, at most the cores shared between the node's workers); None on GPUs.
    Timings of runs compare only at equal threads."""
    from ..components import lazy_params
    from ..engines.base import default_cpu_threads

    if job.devices.device_type != "cpu":
        return None
    chosen = lazy_params(job.training_engine).get("cpu_threads")
    return int(chosen) if chosen else default_cpu_threads(job.devices.count)


def what_trains(model: Any) -> dict[str, Any] | None:
    """What training updates: the parameters, counted on the model's skeleton (no weights),
    and the adapter when one trains instead of the whole model. None when the model cannot be
    built here."""
    from ..adapters.base import parameter_counts
    from ..engines.skeleton import model_skeleton

    skeleton = model_skeleton(model)
    if skeleton is None:
        return None
    trainable, total = parameter_counts(skeleton)
    trained: dict[str, Any] = {"parameters": total, "trainable_parameters": trainable}
    if skeleton.adapter is not None:
        trained["adapter"] = skeleton.adapter.as_config()
    return trained


def finished(card: dict[str, Any], wall_time_s: float, history: dict | None) -> dict[str, Any]:
    """The card with what training took: wall time (this run; a resumed one counts from its
    resumption), steps, and the mean seconds per step, tokens/s and peak memory; and the
    numbers it ended with (:func:`final_metrics`)."""
    entries = (history or {}).get("train", [])
    figures = training_figures(history or {})
    training = {
        "wall_time_s": wall_time_s,
        "train_steps": entries[-1]["step"] if entries else None,
        "s_per_step": figures.get("s/step"),
        "tokens_per_s": figures.get("tokens/s"),
        "peak_memory_mib": figures.get("peak MiB"),
    }
    return {**card, "training": training, "final_metrics": final_metrics(history or {})}


def final_metrics(history: dict) -> dict[str, Any]:
    """The numbers the run ended with, each with its standard error as the loop computed it
    (`acc`, `acc_stderr`): its last validation, and each in-loop task's last scores (`{"validation":
    {step, acc, acc_stderr, ...}, "tasks": {task: {step, ...}}}`)."""
    final: dict[str, Any] = {}
    if history.get("validation"):
        final["validation"] = dict(history["validation"][-1])
    tasks = {name: dict(points[-1]) for name, points in history.get("tasks", {}).items() if points}
    if tasks:
        final["tasks"] = tasks
    return final
