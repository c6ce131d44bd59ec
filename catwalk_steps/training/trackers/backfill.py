"""Checkpoint scores written into TensorBoard after the run, at the training step of each
checkpoint (`checkpoints/<task>/<metric>`, and `..._stderr` where there is one), beside what
the run logged live.

Every point written so far is kept beside the event files (`checkpoint_scalars.json`, data),
and the one event file of checkpoint scores (`*.checkpoints`) is written again whole, in step
order, each time points are added: TensorBoard drops a tag's points after one that comes with a
lower step (its "orphaned data"), which finer checkpoints scored later would otherwise cause,
and every point appears once. A point whose value changed (a directory trained again) shows its
newest value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...files import write_json_atomic
from .tensorboard import EVENT_FILES, check_writable

LEDGER = "checkpoint_scalars.json"
SUFFIX = ".checkpoints"
PREFIX = "checkpoints"


def scalars_of(curves: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, int, float]]:
    """Every point as `{ledger key: (tag, step, value)}`."""
    scalars = {}
    for task, curve in curves.items():
        tag = f"{PREFIX}/{task}/{curve['metric']}"
        for point in curve["points"]:
            scalars[f"{tag}@{point['step']}"] = (tag, point["step"], point["value"])
            if point.get("stderr") is not None:
                error_tag = f"{tag}_stderr"
                scalars[f"{error_tag}@{point['step']}"] = (
                    error_tag,
                    point["step"],
                    point["stderr"],
                )
    return scalars


def backfill(curves: Mapping[str, Mapping[str, Any]], log_dir: Path) -> int:
    """Adds the points of `curves` (:func:`~catwalk_steps.reports.checkpoint_curves.
    curves_of`) to `log_dir`'s checkpoint scores; returns how many were new or changed."""
    log_dir = Path(log_dir)
    check_writable(log_dir, "checkpoints.log_dir")
    ledger_path = log_dir / LEDGER
    ledger = json.loads(ledger_path.read_text()) if ledger_path.is_file() else {}
    new = {key: list(s) for key, s in scalars_of(curves).items() if ledger.get(key) != list(s)}
    if not new:
        return 0
    ledger = {**ledger, **new}
    from torch.utils.tensorboard import SummaryWriter

    earlier = list(log_dir.glob(f"{EVENT_FILES}{SUFFIX}"))
    writer = SummaryWriter(str(log_dir), filename_suffix=SUFFIX)
    try:
        for tag, step, value in sorted(ledger.values(), key=lambda s: (s[1], s[0])):
            writer.add_scalar(tag, value, global_step=step)
    finally:
        writer.close()
    write_json_atomic(ledger_path, ledger)
    for path in earlier:
        path.unlink(missing_ok=True)
    return len(new)
