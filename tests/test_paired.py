"""Paired comparisons (catwalk_steps/reports/paired.py) with known answers: the mean of the
per-document differences, their sample standard error, the 95% interval, within noise or not;
results of other documents are refused in one line; a suite's average difference."""

from __future__ import annotations

import math

import pytest

from catwalk_steps.reports.paired import (
    NotPairedError,
    compare_runs,
    compare_suite,
    comparison_markdown,
    paired,
)


def records(values: list[float], name: str = "acc") -> list[dict]:
    return [
        {"doc": i, "request": {"context": f"q{i}"}, "gold": 0, "metrics": {name: v}}
        for i, v in enumerate(values)
    ]


def test_a_paired_difference_with_a_known_answer():
    # Differences 0, 1, 0, -1, 1: mean 0.2, sample variance 2.8 / 4 = 0.7, se sqrt(0.7 / 5).
    noise = paired(records([1, 0, 1, 1, 0]), records([1, 1, 1, 0, 1]), "acc")
    assert (noise.n, noise.difference) == (5, pytest.approx(0.2))
    assert noise.stderr == pytest.approx(math.sqrt(0.14))
    low, high = noise.interval
    assert (low, high) == (
        pytest.approx(0.2 - 1.959964 * math.sqrt(0.14)),
        pytest.approx(0.2 + 1.959964 * math.sqrt(0.14)),
    )
    assert noise.within_noise is True
    # Differences 1, 1, 1, 1, 0: mean 0.8, variance 0.8 / 4 = 0.2, se 0.2: [0.408, 1.192].
    clear = paired(records([0, 0, 0, 0, 1]), records([1, 1, 1, 1, 1]), "acc")
    assert clear.stderr == pytest.approx(0.2) and clear.within_noise is False
    assert clear.interval_text() == "[+0.4080, +1.1920]" and clear.text() == "+0.8000 ± 0.2000"


def test_results_of_other_documents_are_not_paired():
    # B against A (B - A): B's count first, as `what` names them.
    with pytest.raises(NotPairedError, match="B against A: 2 documents against 3; not the same"):
        paired(records([1, 0, 1]), records([1, 0]), "acc", "B against A")
    other = records([1, 0, 1])
    other[1]["request"] = {"context": "another question"}
    with pytest.raises(NotPairedError, match="document 1 differs"):
        paired(records([1, 0, 1]), other, "acc")


def result(values: list[float]) -> dict:
    return {"acc": sum(values) / len(values), "records": records(values)}


def test_runs_and_a_suites_tasks_are_paired_with_the_baseline_and_averaged():
    runs = {"untrained": result([1, 0, 1, 1, 0]), "trained": result([1, 1, 1, 0, 1])}
    compared = compare_runs(runs, "untrained")
    assert compared["baseline"] == "untrained" and list(compared["runs"]) == ["trained"]
    assert compared["runs"]["trained"]["acc"]["difference"] == pytest.approx(0.2)
    assert compare_runs(runs, "nobody") == {} and compare_runs({"a": {"acc": 1.0}}, "a") == {}
    suite = {
        "untrained": {"x": result([1, 0, 1, 1, 0]), "y": result([0, 0, 0, 0, 1])},
        "trained": {"x": result([1, 1, 1, 0, 1]), "y": result([1, 1, 1, 1, 1])},
    }
    columns = {"y": "y (acc)", "x": "x"}  # the report's order of tasks, whatever the results'
    compared = compare_suite(suite, "untrained", {"x": "acc", "y": "acc"}, columns, ["x", "y"])
    rows = compared["runs"]["trained"]
    assert list(rows) == ["y (acc)", "x", "average"]
    average = rows["average"]
    assert average["difference"] == pytest.approx((0.2 + 0.8) / 2)
    assert average["stderr"] == pytest.approx(math.sqrt(0.14 + 0.04) / 2)
    markdown = comparison_markdown(compared)
    assert "| run | task | difference | 95% interval | |" in markdown
    assert "| trained | x | +0.2000 ± 0.3742 | [-0.5334, +0.9334] | within noise |" in markdown
    assert "| trained | y (acc) | +0.8000 ± 0.2000 | [+0.4080, +1.1920] |  |" in markdown


def test_a_sweeps_configurations_are_paired_seed_by_seed_with_the_baseline():
    """Each configuration's run of a seed against the baseline configuration's run of that
    seed; over two seeds, the mean of the two differences with the standard error of a mean of
    independent ones."""
    configs = {f"lr={lr},seed={s}": {"lr": lr, "seed": s} for lr in (0.001, 0.01) for s in (1, 2)}
    runs = {
        "lr=0.001,seed=1": result([1, 0, 1, 1, 0]),
        "lr=0.001,seed=2": result([0, 0, 0, 0, 1]),
        "lr=0.01,seed=1": result([1, 1, 1, 0, 1]),  # +0.2 against seed 1
        "lr=0.01,seed=2": result([1, 1, 1, 1, 1]),  # +0.8 against seed 2
    }
    compared = compare_runs(runs, {"lr": 0.001}, configs)
    assert compared["baseline"] == "lr=0.001" and list(compared["runs"]) == ["lr=0.01"]
    acc = compared["runs"]["lr=0.01"]["acc"]
    assert acc["difference"] == pytest.approx(0.5)
    assert acc["stderr"] == pytest.approx(math.sqrt(0.14 + 0.04) / 2)
    assert compare_runs(runs, {"lr": 0.1}, configs) == {}


def test_lib_sweep_names_its_baseline_in_its_reports(tmp_path):
    from .conftest import evaluate_library

    steps = evaluate_library(
        tmp_path,
        "lib.sweep(lib.tasks.synthetic, {lr: [0.001, 0.01], seed: [1]}, "
        "{ddp: lib.engines.torch()}, {tiny: lib.models.tiny_gpt2}, suite=['arc_easy'], "
        "baseline={lr: 0.001}).steps",
    )
    assert steps["report"]["baseline"] == {"lr": 0.001}
    assert steps["suite_report"]["baseline"] == {"lr": 0.001}
    plain = evaluate_library(
        tmp_path,
        "lib.sweep(lib.tasks.synthetic, {lr: [0.001]}, {ddp: lib.engines.torch()}, "
        "{tiny: lib.models.tiny_gpt2}).steps",
    )
    assert "baseline" not in plain["report"]  # left out: the report's id as it was


@pytest.mark.slow
def test_a_baseline_that_is_no_run_is_one_line_before_any_step_runs(tmp_path):
    from . import commands
    from .conftest import EXPERIMENTS, TINY_DEMO, tango_command

    overrides = {**TINY_DEMO, "steps.report.baseline": "nobody"}
    command = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "bad", overrides)
    done = commands.run(command, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in output
    assert (
        "ConfigurationError: report.baseline: 'nobody' is none of the runs (trained, untrained)"
        in output
    )
    assert 'Starting step "data"' not in output


def test_holm_adjusts_as_the_textbook_does():
    """Holm (1979): sort, multiply the i-th smallest of m by m - i + 1, keep the running
    maximum, cap at 1; in the order given."""
    from catwalk_steps.reports.holm import holm, p_value

    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert p_value(1.959963984540054, 1.0) == pytest.approx(0.05)
    assert p_value(0.0, 0.0) == 1.0 and p_value(0.1, 0.0) == 0.0 and p_value(0.1, None) is None


def test_a_report_says_how_many_comparisons_and_which_differ_after_holm():
    """Per task one test at 5% each: the report counts them and corrects for all of them; a
    difference that is clear alone can be within noise among many."""
    from catwalk_steps.reports.holm import with_holm
    from catwalk_steps.reports.paired import comparison_lines, comparison_markdown

    def row(difference, stderr):
        return {"metric": "acc", "n": 100, "difference": difference, "stderr": stderr}

    rows = {f"task{i}": row(0.0, 0.05) for i in range(12)}
    rows["task0"] = row(0.105, 0.05)  # z = 2.1: p = 0.036 alone, 0.39 among 12
    rows["task1"] = row(0.30, 0.05)  # z = 6: differs after any correction
    comparison = with_holm({"baseline": "untrained", "by": "task", "runs": {"trained": rows}})
    assert comparison["comparisons"] == 12
    markdown = comparison_markdown(comparison)
    assert "| trained | task0 | +0.1050 ± 0.0500 |" in markdown
    task0 = next(line for line in markdown.splitlines() if "| task0 |" in line)
    task1 = next(line for line in markdown.splitlines() if "| task1 |" in line)
    assert "within noise (Holm)" in task0 and "| 0.3930 |" in task0  # 0.0357 x 11
    assert "differs (Holm)" in task1
    assert comparison_lines(comparison)[-1] == (
        "12 paired comparisons; 1 differs from the baseline after Holm's correction for all of "
        "them (family-wise 5%)"
    )
