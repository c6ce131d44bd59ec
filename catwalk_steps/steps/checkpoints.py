"""`catwalk::checkpoints`: every chosen checkpoint of a run scored on a suite, each (checkpoint,
task) its own cached step identified by the checkpoint's content.

Why the per-checkpoint steps are made when this step runs, not when the graph is built: a
training step of the same experiment has written no checkpoint then, and its unique id says
nothing of what it will write (trained again in the same directory, on a GPU, it may write
other weights under the same id; trained further, its id changes although its first
checkpoints do not). So this step, which always runs (it is not cached, and costs a directory
listing and a manifest read per checkpoint), reads each chosen checkpoint's content
(:mod:`catwalk_steps.checkpoints.content`) and asks the workspace for `catwalk::evaluate` of
`catwalk::checkpoint_model` with that content: a cached one is read back, a new one is scored
and cached. A run directory on disk (another workspace's) is read at graph build too, so that a
bad path or a choice it does not have fails before anything runs.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tango import Step

from ..checkpoints import CheckpointError, model_from_checkpoint, problem_with
from ..checkpoints.content import coarse_to_fine, tensors_problem, weights_content
from ..checks.checkpoints import check_checkpoints_step, chosen_of_directory
from ..parallel.nested import run_in_slots
from ..parallel.slot import run_parallelism
from ..reports import Report, print_report
from ..reports.checkpoint_curves import CheckpointReportFormat, build_checkpoint_report
from ..scoring.rank_classifier import RankClassifier
from ..settings import EVALUATION_DEFAULTS, METRIC
from ..tasks import Task
from ..training.trackers.backfill import backfill
from ..training.trackers.tensorboard import TENSORBOARD_DIR
from ..training.trackers.wandb_backfill import backfill_wandb
from ..workspace.formats import HFModelFormat
from ..workspace.step_cache import held_by
from .evaluate import Evaluate


def content_json(checkpoint: Path) -> str:
    """A checkpoint's content (:func:`~catwalk_steps.checkpoints.content.weights_content`) as
    one JSON string, keys sorted."""
    return json.dumps(weights_content(checkpoint), sort_keys=True)


@Step.register("catwalk::checkpoint_model")
class CheckpointModel(Step[RankClassifier]):
    """One checkpoint's model as a Hugging Face directory, identified by its content (its
    weight files' SHA-256, model shape and model files), not by its path: the same weights in
    another run's directory are the same step.

    :param checkpoint: the checkpoint directory (not part of the step's identity).
    :param content: :func:`~catwalk_steps.checkpoints.content.weights_content` of it, as JSON
        (:func:`content_json`: data a step graph's config carries as it is).
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = HFModelFormat()
    SKIP_ID_ARGUMENTS = {"checkpoint"}

    def run(self, checkpoint: str, content: str) -> RankClassifier:  # type: ignore[override]
        directory = Path(checkpoint)
        problem = problem_with(directory) or tensors_problem(directory)  # every file checked
        if problem is None and content_json(directory) != content:
            problem = f"{directory}: changed since it was chosen (run the command again)"
        if problem is not None:
            raise CheckpointError(problem)
        return model_from_checkpoint(directory)


@Step.register("catwalk::checkpoints")
class EvaluateCheckpoints(Step[Report]):
    """Scores the chosen checkpoints of a run on tasks; prints and writes a task x step table
    and `checkpoint_curves.png` (with ± one standard error where the results have one), and
    writes the values into TensorBoard at their training steps.

    :param run: a `catwalk::train` step (`lib.ref('trained')`: it must keep the checkpoints
        chosen, `keep_last_checkpoints`) or a run's work directory on disk.
    :param tasks: the tasks, by name or block, as `catwalk::evaluate`'s `task`.
    :param every: the checkpoints whose step is a multiple of it. `every`, `last` and
        `steps` together choose any checkpoint one of them chooses; none given: every one.
    :param last: the newest n checkpoints.
    :param steps: these checkpoints, by training step (each must be one the run writes).
    :param batch_size: as `catwalk::evaluate`'s.
    :param max_length: as `catwalk::evaluate`'s (the training's, to score as the loop does).
    :param metric: the score shown ("acc", "acc_norm"; a label's or generative task's own).
    :param title: the report's title.
    :param tensorboard: write `checkpoints/<task>/<metric>` scalars at each checkpoint's step
        into `log_dir`, each point once.
    :param log_dir: where TensorBoard's files go; default: the run's `tensorboard/`.
    :param wandb: `{project, entity, mode}`: log the scores into the training run's W&B run,
        against `checkpoint/step` (:mod:`~catwalk_steps.training.trackers.wandb_backfill`).
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = False

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs = {**kwargs, "tasks": [Task.built(t) for t in kwargs.get("tasks") or []]}
        check_checkpoints_step(kwargs)
        return kwargs

    def _replace_steps_with_results(self, o: Any, workspace: Any) -> Any:
        # The training step stays a handle (its work directory is what is read): its result
        # is made if needed, never loaded here.
        if isinstance(o, Step) and isinstance(o.format, HFModelFormat):
            if o not in workspace.step_cache:
                o.result(workspace=workspace, needed_by=self)
            return o
        return super()._replace_steps_with_results(o, workspace)

    def run(  # type: ignore[override]
        self,
        run: Any,
        tasks: list[Task],
        every: int | None = None,
        last: int | None = None,
        steps: list[int] | None = None,
        batch_size: int = EVALUATION_DEFAULTS["batch_size"],
        max_length: int | None = EVALUATION_DEFAULTS["max_length"],
        metric: str = METRIC,
        title: str = "Checkpoints",
        tensorboard: bool = True,
        log_dir: str | None = None,
        wandb: dict[str, Any] | None = None,
    ) -> Report:
        work_dir = self.workspace.work_dir(run) if isinstance(run, Step) else Path(run)
        resumed_from = run.kwargs.get("resume_from") if isinstance(run, Step) else None
        chosen = chosen_of_directory(work_dir, every, last, steps, "checkpoints.run", resumed_from)
        settings = {"batch_size": batch_size, "max_length": max_length}
        evaluations = {
            step: self.evaluations(step, checkpoint, tasks, settings)
            for step, checkpoint in chosen.items()
        }
        order = coarse_to_fine(list(evaluations))  # early results span the run
        slots = run_parallelism()
        if slots > 1 and self.config_of_tasks() is not None:
            config = self.graph_config(order, chosen, settings)
            run_in_slots(config, self.workspace, slots, "checkpoints")
        for step in order:
            for evaluation in evaluations[step].values():
                evaluation.result(self.workspace, needed_by=self)
            self.logger.info("checkpoint at step %d: scored on %d tasks", step, len(tasks))
        held_by(self.workspace).release()
        report_step = CheckpointReport(
            step_name=f"{self.name},report",
            results={str(step): evaluations[step] for step in sorted(evaluations)},
            metric=metric,
            title=title,
        )
        report = report_step.result(self.workspace, needed_by=self)
        print_report(report, self.workspace.step_info(report_step).result_location)
        curves = report.details["checkpoints"]
        if tensorboard:
            backfill(curves, Path(log_dir) if log_dir else work_dir / TENSORBOARD_DIR)
        if wandb is not None:
            backfill_wandb(curves, work_dir, wandb)
        return report

    def config_of_tasks(self) -> list[Any] | None:
        """The tasks as the experiment gives them (data a slot builds again), or None for a
        step built in Python."""
        try:
            return list(self.config["tasks"])
        except (ValueError, KeyError, TypeError):
            return None

    def graph_config(
        self, order: list[int], chosen: dict[int, Path], settings: dict[str, Any]
    ) -> dict[str, Any]:
        """The evaluations of the checkpoints as a step graph's config, in `order`: the same
        steps as :meth:`evaluations` makes, for slots to run."""
        blocks = self.config_of_tasks() or []
        config: dict[str, Any] = {}
        for step in order:
            model = f"{self.name},step{step},model"
            config[model] = {
                "type": "catwalk::checkpoint_model",
                "checkpoint": str(chosen[step]),
                "content": content_json(chosen[step]),
            }
            for block in blocks:  # copies: building a task takes its block apart
                name = Task.built(copy.deepcopy(block)).name
                config[f"{self.name},step{step},{name}"] = {
                    "type": "catwalk::evaluate",
                    "model": {"type": "ref", "ref": model},
                    "task": copy.deepcopy(block),
                    **settings,
                }
        return config

    def evaluations(
        self, step: int, checkpoint: Path, tasks: list[Task], settings: dict[str, Any]
    ) -> dict[str, Evaluate]:
        """The (checkpoint, task) evaluate steps of one checkpoint, by task name."""
        model = CheckpointModel(
            step_name=f"{self.name},step{step},model",
            checkpoint=str(checkpoint),
            content=content_json(checkpoint),
        )
        return {
            task.name: Evaluate(
                step_name=f"{self.name},step{step},{task.name}", model=model, task=task, **settings
            )
            for task in tasks
        }


@Step.register("catwalk::checkpoint_report")
class CheckpointReport(Step[Report]):
    """The step x task table and `checkpoint_curves.png` of checkpoint evaluations; its
    identity is theirs (the checkpoints' content), so it is made again only when one changed.

    :param results: `{training step: {task: evaluate step}}`.
    :param metric: the score shown, as `catwalk::checkpoints`'s.
    :param title: the report's title.
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = CheckpointReportFormat()

    def run(  # type: ignore[override]
        self, results: dict[str, dict[str, dict[str, Any]]], metric: str, title: str
    ) -> Report:
        by_step = {int(step): by_task for step, by_task in results.items()}
        return build_checkpoint_report(by_step, metric, title)
