"""Checkpoint scores written into the training run's W&B run after it ended, against a step
metric of their own.

W&B's history step must always increase within a run: a score of the checkpoint at step 25,
logged after the run reached step 200, cannot go at step 25 (OLMo logs such scores to a new
run for this reason). Here each point is a row after the run's last one, carrying its
checkpoint's training step as `checkpoint/step`, and the run declares `checkpoints/*` to be
plotted against it (`define_metric(..., step_metric=...)`): the charts show each score at its
training step, in the same run as the training curves, and the run's own step order holds.

The run is the training step's (its id kept in `<work dir>/wandb_run.json` by the tracker, made
here if the run had none); offline, the new rows come after the steps its segments on disk
hold, and `wandb sync --append` uploads them in order. Points already logged (a ledger beside,
`wandb_checkpoints.json`) are not logged again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...files import write_json_atomic
from .backfill import scalars_of
from .wandb import (
    INIT_TIMEOUT_S,
    OFFLINE_MODES,
    check_server_answers,
    offline_steps_on_disk,
    run_id_of,
    wandb_mode,
)

LEDGER = "wandb_checkpoints.json"
STEP_METRIC = "checkpoint/step"


def rows_of(scalars: Mapping[str, Any]) -> list[dict[str, float]]:
    """One row per checkpoint step, in step order: its step metric and its scores."""
    by_step: dict[int, dict[str, float]] = {}
    for tag, step, value in scalars.values():
        by_step.setdefault(step, {STEP_METRIC: step})[tag] = value
    return [by_step[step] for step in sorted(by_step)]


def backfill_wandb(
    curves: Mapping[str, Mapping[str, Any]], work_dir: Path, settings: Mapping[str, Any]
) -> int:
    """Logs the new points of `curves` into the W&B run of the training run in `work_dir`
    (`settings`: `project`, `entity`, `mode` as the `wandb::log` tracker takes them); returns
    how many rows were logged."""
    import wandb

    work_dir = Path(work_dir)
    ledger_path = work_dir / LEDGER
    ledger = json.loads(ledger_path.read_text()) if ledger_path.is_file() else {}
    new = {key: s for key, s in scalars_of(curves).items() if ledger.get(key) != list(s)}
    if not new:
        return 0
    mode = wandb_mode(settings.get("mode"))
    offline = mode in OFFLINE_MODES
    if not offline:
        check_server_answers()
    run_id = run_id_of(work_dir)
    run = wandb.init(
        id=run_id,
        dir=str(work_dir),
        mode=mode,  # type: ignore[arg-type]
        project=settings.get("project"),
        entity=settings.get("entity"),
        resume=None if offline else "allow",
        settings=wandb.Settings(init_timeout=INIT_TIMEOUT_S),
    )
    try:
        run.define_metric(STEP_METRIC)
        run.define_metric("checkpoints/*", step_metric=STEP_METRIC)
        step = offline_steps_on_disk(work_dir / "wandb", run_id) + 1 if offline else None
        rows = rows_of(new)
        for index, row in enumerate(rows):
            run.log(row, step=None if step is None else step + index)
    finally:
        run.finish()
    write_json_atomic(ledger_path, {**ledger, **{key: list(s) for key, s in new.items()}})
    return len(rows)
