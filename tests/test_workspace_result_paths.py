"""A step record is data: its result path is not where the result is read from (the step's
own directory is), so it is not what `tango run` shows either. A record whose path names
another step's directory, or holds `../`, was shown as that step's result."""

from __future__ import annotations

import pytest

from catwalk_steps.workspace.records import StepRecords

from . import commands
from .conftest import EXPERIMENTS, TANGO_ENV, TINY_DEMO, step_result, tango_command

pytestmark = pytest.mark.slow
DEMO = EXPERIMENTS / "demo.jsonnet"


def test_a_planted_result_path_is_not_shown(tmp_path):
    workspace = tmp_path / "ws"
    env = {**TANGO_ENV, "COLUMNS": "400"}
    done = commands.run(tango_command(DEMO, workspace, "first", TINY_DEMO), 300, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    own = {step: step_result(workspace, "first", step) for step in ("trained", "report", "data")}
    elsewhere = {"trained": str(own["data"]), "report": f"{own['report']}/../../../x"}
    with StepRecords(workspace / "stepinfo.sqlite") as records:
        for step, location in elsewhere.items():
            info = records[own[step].name]
            info.result_location = location
            records[own[step].name] = info
        records.commit()
    done = commands.run(tango_command(DEMO, workspace, "again", TINY_DEMO), 300, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and 'Starting step "' not in output, output[-3000:]
    assert "../" not in output, output[-3000:]
    table = {line.split("│")[1].strip(): line for line in output.splitlines() if "│" in line}
    assert "/cache/TrainRankClassifier-" in table["trained"]  # (cut short with "…")
    assert "LoadTask" not in table["trained"]
    said = [line for line in output.splitlines() if line.startswith("report.md / report.csv")]
    assert said and said[0].endswith(f" in {own['report']}"), said
    assert step_result(workspace, "again", "trained") == own["trained"]
