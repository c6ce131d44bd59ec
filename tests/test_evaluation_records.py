"""Per-document records and standard errors through `tango run` (experiments/demo.jsonnet at
test size, run once for the module): every evaluation writes `records.jsonl` beside its
metrics, each metric has its standard error computed from them, the report shows `value ± se`
and says what ± is, and a damaged, edited or deleted records file is one line naming it, never
a number."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from catwalk_steps.metrics.stderr import mean_stderr
from catwalk_steps.sealed import write_digests

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
    # Trained against untrained, document by document (the demo names its runs so).
    paired = payload["comparison"]["runs"]["trained"]["acc"]
    assert payload["comparison"]["baseline"] == "untrained" and paired["n"] == 8
    assert (
        "## Paired with `untrained`" in markdown
        and f"| trained | acc | {paired['difference']:+.4f}" in markdown
    )
    line = f"trained - untrained, acc (paired, 95% interval): {paired['difference']:+.4f} ± "
    assert line in printed  # on the terminal too


def test_the_in_loop_validation_has_standard_errors_that_trackers_log(demo):
    from catwalk_steps.training.trackers.base import history_rows

    from .conftest import history

    logged = history(demo, "first", "trained")
    last = logged["validation"][-1]
    n = last["count"]
    assert last["acc_stderr"] == pytest.approx(math.sqrt(last["acc"] * (1 - last["acc"]) / (n - 1)))
    rows = dict(history_rows(logged))
    assert rows[last["step"]]["validation/acc_stderr"] == last["acc_stderr"]


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
            f"({path}: changed since it was written"
        ) in output
        assert f"`catwalk-clear-step {directory}`" in output and "Traceback" not in output
    finally:
        path.write_text(text)


def compare(*arguments: str):
    """`catwalk-compare` as a user runs it: the console script (served: tests/commands.py), or
    before the package is installed again with it, a fresh interpreter running its module."""
    import sys

    from . import commands

    script = Path(sys.executable).with_name("catwalk-compare")
    if script.exists():
        return commands.run([str(script), *arguments], timeout=120)
    module = [sys.executable, "-m", "catwalk_steps.commands.compare"]
    return commands.run([*module, *arguments], timeout=120, fresh=True)


def test_catwalk_compare_prints_the_paired_table_and_the_documents_that_changed(demo):
    untrained = step_result(demo, "first", "eval_untrained")
    trained = step_result(demo, "first", "eval_trained")
    done = compare(str(untrained), str(trained))
    assert done.returncode == 0, done.stderr
    report = json.loads((step_result(demo, "first", "report") / "report.json").read_text())
    acc = report["comparison"]["runs"]["trained"]["acc"]
    line = next(line for line in done.stdout.splitlines() if line.startswith("acc "))
    assert f"{acc['difference']:+.4f} ± {acc['stderr']:.4f}" in line
    a = [json.loads(x) for x in (untrained / "records.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (trained / "records.jsonl").read_text().splitlines()]
    moved = [
        x["doc"] for x, y in zip(a, b, strict=True) if x["metrics"]["acc"] != y["metrics"]["acc"]
    ]
    assert f"{len(moved)} of 8 documents changed on acc:" in done.stdout
    assert [
        int(x.split()[1].rstrip(":")) for x in done.stdout.splitlines() if x.startswith("  doc ")
    ] == moved


def test_catwalk_compare_refuses_in_one_line_what_it_cannot_pair(demo, tmp_path):
    trained = step_result(demo, "first", "eval_trained")
    done = compare(str(tmp_path), str(trained))
    assert done.returncode == 1 and done.stderr.strip() == (
        f"catwalk-compare: ConfigurationError: {tmp_path}: not an evaluation's result directory "
        "(no data.json)"
    )
    old = tmp_path / "old"
    old.mkdir()
    (old / "data.json").write_text((trained / "data.json").read_text())
    done = compare(str(old), str(trained))
    assert done.returncode == 1 and "has no per-document records (records.jsonl)" in done.stderr
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    (fewer / "data.json").write_text((trained / "data.json").read_text())
    lines = (trained / "records.jsonl").read_text().splitlines(keepends=True)
    (fewer / "records.jsonl").write_text("".join(lines[:5]))
    write_digests(fewer, ["data.json", "records.jsonl"])  # as if evaluated so
    done = compare(str(fewer), str(trained))  # A has 5 documents, B 8: each path its count
    assert done.returncode == 1 and done.stderr.strip() == (
        f"catwalk-compare: NotPairedError: {trained} against {fewer}: 8 documents against 5; "
        "not the same ones"
    )


def flipped_paired_difference(untrained: Path, trained: Path, doc: int) -> str:
    """What the paired difference on acc would read with `trained`'s record of `doc` flipped."""
    a = [json.loads(x) for x in (untrained / "records.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (trained / "records.jsonl").read_text().splitlines()]
    b[doc]["metrics"]["acc"] = 1.0 - b[doc]["metrics"]["acc"]
    mean = sum(y["metrics"]["acc"] - x["metrics"]["acc"] for x, y in zip(a, b, strict=True))
    mean /= len(a)
    return f"{mean:+.4f}"


def report_again(demo: Path, title: str):
    """A new report of the cached evaluations (its title: another step), through `tango run`."""
    from . import commands
    from .conftest import tango_command

    again = {**TINY_DEMO, "steps.report.title": title}
    return commands.run(tango_command(DEMO, demo, title.lower(), again), 300)


def test_a_metric_flipped_in_records_is_one_line_naming_the_file_never_a_number(demo):
    """catwalk-compare and a report read the records: the edited number reaches neither."""
    from .commands import error_lines

    untrained = step_result(demo, "first", "eval_untrained")
    trained = step_result(demo, "first", "eval_trained")
    path = trained / "records.jsonl"
    text = path.read_text()
    edited = flipped_paired_difference(untrained, trained, doc=0)
    assert edited not in compare(str(untrained), str(trained)).stdout  # it would change it
    records = [json.loads(line) for line in text.splitlines()]
    records[0]["metrics"]["acc"] = 1.0 - records[0]["metrics"]["acc"]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        done = compare(str(untrained), str(trained))
        assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1
        assert done.stderr.startswith(f"catwalk-compare: ConfigurationError: {trained}: cannot be")
        assert f"({path}: changed since it was written" in done.stderr
        done = report_again(demo, "Flipped")
        output = done.stdout + done.stderr
        assert done.returncode != 0 and edited not in output
        lines = error_lines(output)
        assert len(lines) == 1 and "DamagedResultError" in lines[0], lines or output[-3000:]
        assert f"({path}: changed since it was written" in lines[0]
    finally:
        path.write_text(text)


def test_a_deleted_records_file_is_one_line_naming_it_not_a_missing_table(demo):
    """Before, the paired lines vanished from the report with no word, and catwalk-compare
    said the result was older than records."""
    from .commands import error_lines

    untrained = step_result(demo, "first", "eval_untrained")
    path = untrained / "records.jsonl"
    kept = path.rename(path.with_name("records.kept"))
    try:
        done = compare(str(untrained), str(step_result(demo, "first", "eval_trained")))
        assert done.returncode == 1 and done.stderr.count("\n") == 1
        assert f"({path}: missing (digests.json beside it says it was written" in done.stderr
        done = report_again(demo, "Deleted")
        output = done.stdout + done.stderr
        lines = error_lines(output)
        assert done.returncode != 0 and "Paired" not in output and "paired" not in output
        assert len(lines) == 1 and "DamagedResultError" in lines[0], lines or output[-3000:]
        assert f"({path}: missing" in lines[0]
    finally:
        kept.rename(path)
