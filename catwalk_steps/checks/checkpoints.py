"""Graph-build checks of `catwalk::checkpoints`: which checkpoints a run has (a directory on
disk) or will have (a training step of the experiment: its schedule and what it keeps), and
that the choice names some of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..checkpoints import CheckpointError
from ..checkpoints.content import chosen_steps, lineage_checkpoints, weights_content
from ..errors import whole
from ..settings import DEFAULTS

KEY = "checkpoints"


def check_checkpoints_step(kwargs: dict[str, Any]) -> None:
    """One line naming the key for a bad choice, a run that has (or keeps) no such checkpoint,
    or no task."""
    if not kwargs.get("tasks"):
        raise ConfigurationError(f"{KEY}.tasks: give at least one task")
    names = [task.name for task in kwargs["tasks"]]
    twice = next((name for index, name in enumerate(names) if name in names[:index]), None)
    if twice is not None:
        raise ConfigurationError(
            f"{KEY}.tasks: '{twice}' is given twice (a checkpoint's scores are kept by task "
            "name); score the other setting in a second lib.checkpoints with another name"
        )
    whole(kwargs.get("every"), f"{KEY}.every", optional=True)
    whole(kwargs.get("last"), f"{KEY}.last", optional=True)
    for step in kwargs.get("steps") or []:
        whole(step, f"{KEY}.steps", minimum=0)
    choice = (kwargs.get("every"), kwargs.get("last"), kwargs.get("steps"))
    run = kwargs.get("run")
    if isinstance(run, (str, Path)):
        for checkpoint in chosen_of_directory(Path(run), *choice, f"{KEY}.run").values():
            try:
                weights_content(checkpoint)  # its manifest, read as data; no weight loaded
            except CheckpointError as e:
                raise ConfigurationError(f"{KEY}.run: {e}") from None
    elif hasattr(run, "kwargs") and hasattr(run, "unique_id"):  # a step of the experiment
        check_schedule(run, *choice)
    else:
        raise ConfigurationError(
            f"{KEY}.run: a catwalk::train step (lib.ref('trained')) or a run's work directory, "
            f"got {type(run).__name__}"
        )


def chosen_of_directory(
    work_dir: Path, every: Any, last: Any, steps: Any, key: str, resumed_from: Any = None
) -> dict[int, Path]:
    """The chosen complete checkpoints of a run's work directory (or its `checkpoints/`; with
    those of the run it resumed from before them), by step; one line when there are none or a
    listed step is missing."""
    work_dir = Path(work_dir)
    if work_dir.name == "checkpoints":
        work_dir = work_dir.parent
    if not work_dir.is_dir():
        raise ConfigurationError(f"{key}: {work_dir} does not exist")
    found = lineage_checkpoints(work_dir, Path(resumed_from) if resumed_from else None)
    if not found:
        raise ConfigurationError(f"{key}: no complete checkpoint in {work_dir}")
    missing = sorted(set(steps or []) - set(found))
    if missing:
        raise ConfigurationError(
            f"{key}: {work_dir} has no checkpoint at step {', '.join(map(str, missing))} "
            f"(it has {', '.join(map(str, found))})"
        )
    chosen = chosen_steps(list(found), every, last, steps)
    if not chosen:
        raise ConfigurationError(
            f"{key}: every={every} chooses none of the checkpoints of {work_dir} "
            f"(steps {', '.join(map(str, found))})"
        )
    return {step: found[step] for step in chosen}


def check_schedule(train: Any, every: Any, last: Any, steps: Any) -> None:
    """A training step of the experiment: the chosen steps must be checkpoints it writes and
    keeps (`keep_last_checkpoints`, unless `remove_stale_checkpoints` is off)."""
    keys = train.kwargs
    total, interval = (
        keys.get("train_steps"),
        keys.get("checkpoint_every", DEFAULTS["checkpoint_every"]),
    )
    if not isinstance(total, int) or not isinstance(interval, int) or interval < 1:
        return  # trained by epochs: its checkpoints are known once it has run
    schedule = sorted({*range(interval, total + 1, interval), total})
    missing = sorted(set(steps or []) - set(schedule))
    if missing:
        raise ConfigurationError(
            f"{KEY}.steps: '{train.name}' writes no checkpoint at step "
            f"{', '.join(map(str, missing))} (checkpoint_every {interval}, train_steps {total})"
        )
    chosen = chosen_steps(schedule, every, last, steps)
    if not chosen:
        raise ConfigurationError(f"{KEY}.every: chooses none of '{train.name}''s checkpoints")
    keep = keys.get("keep_last_checkpoints", DEFAULTS["keep_last_checkpoints"])
    if (
        keys.get("remove_stale_checkpoints", True)
        and schedule.index(chosen[0]) < len(schedule) - keep
    ):
        raise ConfigurationError(
            f"{KEY}.run: '{train.name}' keeps only its newest {keep} checkpoints "
            f"(keep_last_checkpoints) and the best, but step {chosen[0]} is chosen; set its "
            f"keep_last_checkpoints to {len(schedule) - schedule.index(chosen[0])} or more"
        )
