"""Checkpoint scores written into TensorBoard after the run, at the training step of each
checkpoint (`checkpoints/<task>/<metric>`, and `..._stderr` where there is one), beside what
the run logged live.

A ledger beside the event files (`checkpoint_scalars.json`, data) says which points are
written, so a run whose checkpoints are evaluated again, or trained further and evaluated,
adds only its new points: TensorBoard shows every point once. A point whose value changed (a
directory trained again) is written again, and the newer event file shows it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...files import write_json_atomic
from .tensorboard import check_writable

LEDGER = "checkpoint_scalars.json"
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
    """Writes the points of `curves` (:func:`~catwalk_steps.reports.checkpoint_curves.
    curves_of`) not yet in `log_dir`; returns how many were written."""
    log_dir = Path(log_dir)
    check_writable(log_dir, "checkpoints.log_dir")
    ledger_path = log_dir / LEDGER
    ledger = json.loads(ledger_path.read_text()) if ledger_path.is_file() else {}
    new = {key: s for key, s in scalars_of(curves).items() if ledger.get(key) != s[2]}
    if not new:
        return 0
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(log_dir), filename_suffix=".checkpoints")
    try:
        for tag, step, value in sorted(new.values(), key=lambda s: (s[1], s[0])):
            writer.add_scalar(tag, value, global_step=step)
    finally:
        writer.close()
    write_json_atomic(ledger_path, {**ledger, **{key: s[2] for key, s in new.items()}})
    return len(new)
