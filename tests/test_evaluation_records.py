"""Per-document records and standard errors through `tango run` (experiments/demo.jsonnet at
test size, run once for the module): every evaluation writes `records.jsonl` beside its
metrics, each metric has its standard error computed from them, the report shows `value ± se`
and says what ± is, and a damaged records file is one line naming it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from catwalk_steps.kinds.stderr import mean_stderr

from .conftest import EXPERIMENTS, TINY_DEMO, step_result
from .conftest import run_tango as run

pytestmark = [pytest.mark.slow]

DEMO = EXPERIMENTS / "demo.jsonnet"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    workspace = tmp_path_factory.mktemp("records") / "ws"
    output = run(DEMO, workspace, "first", TINY_DEMO)
    (workspace / "first.out").write_text(output)
    return workspace


def test_every_evaluation_writes_its_records_beside_its_metrics(demo):
    for step in ("eval_trained", "eval_untrained"):
        directory = step_result(demo, "first", step)
        metrics = json.loads((directory / "data.json").read_text())
        assert "records" not in metrics  # apart, as JSON lines
        lines = (directory / "records.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert len(records) == metrics["n"] == 8
        first = records[0]
        assert set(first) == {"doc", "request", "answer", "gold", "metrics"}
        assert set(first["answer"]) == {"logprobs", "pick", "pick_norm"}
        assert len(first["answer"]["logprobs"]) == len(first["request"]["choices"])
        for name in ("acc", "acc_norm"):
            values = [record["metrics"][name] for record in records]
            assert sum(values) / len(values) == metrics[name]
            assert metrics[f"{name}_stderr"] == mean_stderr(values)
            assert [r["answer"]["pick"] == r["gold"] for r in records] == [
                bool(v) for v in [r["metrics"]["acc"] for r in records]
            ]


def test_the_report_shows_each_value_with_its_standard_error_and_says_what_it_is(demo):
    report = step_result(demo, "first", "report")
    payload = json.loads((report / "report.json").read_text())
    trained = json.loads((step_result(demo, "first", "eval_trained") / "data.json").read_text())
    assert payload["stderrs"]["trained"]["acc"] == trained["acc_stderr"]
    assert "acc_stderr" not in payload["rows"]["trained"]  # beside its value, not a column
    markdown = (report / "report.md").read_text()
    acc, se = trained["acc"], trained["acc_stderr"]
    assert f"| trained | {acc:.4f} ± {se:.4f} |" in markdown
    assert "± in a run's cell: the standard error over the task's documents" in markdown
    printed = (demo / "first.out").read_text()
    assert "± in a run's cell: the standard error over the task's documents" in printed
    assert math.isfinite(se) and se > 0


def test_a_damaged_records_file_is_one_line_naming_it(demo):
    directory = step_result(demo, "first", "eval_untrained")
    path = directory / "records.jsonl"
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][:10] + "\n")  # a line cut short
    try:
        from . import commands
        from .conftest import tango_command

        again = {**TINY_DEMO, "steps.report.title": "Again"}  # a new report reads the results
        done = commands.run(tango_command(DEMO, demo, "damaged", again), 300)
        output = done.stdout + done.stderr
        assert done.returncode != 0
        assert (
            f"DamagedResultError: {directory}: this cached step result cannot be read "
            f"({path}: line 4 is not JSON"
        ) in output
        assert f"`catwalk-clear-step {directory}`" in output and "Traceback" not in output
    finally:
        path.write_text(text)
