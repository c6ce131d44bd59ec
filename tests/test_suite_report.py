"""The suite report: task x run with the average over tasks (markdown, CSV, JSON, printed),
mean ± std per task over seeds in a sweep, and in-loop task scores plotted per task."""

from __future__ import annotations

import json
import statistics

import pytest

from catwalk_steps.reports import ReportFormat, build_report, build_suite_report, print_report


def result(acc: float, n: int = 100, **extra) -> dict:
    return {"acc": acc, "acc_norm": acc / 2, "n": n, "task": "t", "split": "validation", **extra}


RESULTS = {
    "untrained": {
        "arc_easy": result(0.25),
        "mmlu": result(0.3, subtasks={"anatomy": {}}),
        "boolq": result(0.65),
    },
    "trained": {"arc_easy": result(0.5), "mmlu": result(0.4), "boolq": result(0.9)},
}


def test_a_suite_report_is_a_run_by_task_table_with_the_average():
    report = build_suite_report(RESULTS, tasks=["mmlu", "arc_easy"], title="Suite")
    assert report.markdown().splitlines() == [
        "| run | mmlu | arc_easy | boolq | average |",
        "|---|---:|---:|---:|---:|",
        "| untrained | 0.3000 | 0.2500 | 0.6500 | 0.4000 |",
        "| trained | 0.4000 | 0.5000 | 0.9000 | 0.6000 |",
    ]
    assert report.csv().splitlines()[0] == "run,mmlu,arc_easy,boolq,average"
    assert report.details["results"]["untrained"]["mmlu"]["subtasks"] == {"anatomy": {}}
    norm = build_suite_report(RESULTS, metric="acc_norm")
    assert norm.rows["trained"] == pytest.approx(
        {"arc_easy": 0.25, "mmlu": 0.2, "boolq": 0.45, "average": 0.3}
    )


def test_in_a_sweep_each_task_is_the_mean_and_std_over_seeds():
    accs = {("1e-3", 1): (0.5, 0.2), ("1e-3", 2): (0.6, 0.4), ("3e-3", 1): (0.7, 0.1)}
    results = {
        f"lr={lr},seed={seed}": {"arc_easy": result(a), "boolq": result(b)}
        for (lr, seed), (a, b) in accs.items()
    }
    configs = {f"lr={lr},seed={seed}": {"lr": lr, "seed": seed} for lr, seed in accs}
    report = build_suite_report(results, configs=configs)
    summaries = report.summaries()
    arc = summaries["lr=1e-3"]["arc_easy"]
    assert (arc.mean, arc.count) == (pytest.approx(0.55), 2)
    assert arc.std == pytest.approx(statistics.stdev([0.5, 0.6]))
    average = summaries["lr=1e-3"]["average"]
    assert average.mean == pytest.approx(statistics.fmean([0.35, 0.5]))
    assert average.std == pytest.approx(statistics.stdev([0.35, 0.5]))
    assert summaries["lr=3e-3"]["boolq"].std is None  # one seed
    header, rows = report.table_rows()
    assert header == ["configuration", "seeds", "arc_easy", "boolq", "average"]
    assert rows[0] == ["lr=1e-3", "2", "0.5500 ± 0.0707", "0.3000 ± 0.1414", "0.4250 ± 0.1061"]


def history(points: list[tuple[int, float]]) -> dict:
    return {
        "train": [],
        "validation": [],
        "tasks": {
            "arc_easy": [{"step": s, "acc": a, "acc_norm": a, "count": 8} for s, a in points]
        },
    }


def test_in_loop_task_scores_are_kept_and_plotted_per_task_once(tmp_path):
    """The suite's report keeps them; the training runs' report plots them (a pipeline with a
    suite wrote the same plot twice)."""
    import matplotlib.image

    trained = {"arc_easy": result(0.5, training_history=history([(10, 0.3), (20, 0.5)]))}
    report = build_suite_report({"trained": trained, "untrained": RESULTS["untrained"]})
    assert report.task_histories == {"trained": history([(10, 0.3), (20, 0.5)])["tasks"]}
    (tmp_path / "suite").mkdir()
    ReportFormat().write(report, tmp_path / "suite")
    assert not (tmp_path / "suite" / "in_loop_tasks.png").exists()
    read = ReportFormat().read(tmp_path / "suite")
    assert read.rows == report.rows and read.task_histories == report.task_histories
    assert "training_history" not in json.dumps(read.details)
    runs = build_report(
        {"trained": trained["arc_easy"], "untrained": RESULTS["untrained"]["arc_easy"]}
    )
    (tmp_path / "runs").mkdir()
    ReportFormat().write(runs, tmp_path / "runs")
    image = matplotlib.image.imread(tmp_path / "runs" / "in_loop_tasks.png")
    assert image.shape[0] > 200 and image.shape[1] > 300


def test_a_table_wider_than_the_terminal_is_printed_turned(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "40")
    tasks = ["arc_easy", "arc_challenge", "hellaswag", "winogrande"]
    results = {run: {t: result(0.25) for t in tasks} for run in ("untrained", "trained")}
    location = "/workspace/cache/SuiteReport-001-4Gxj75CLdxgp1e5ths6YbhMmimdJ2jHB"
    print_report(build_suite_report(results), location=location)
    lines = capsys.readouterr().out.splitlines()
    assert any("task (acc)" in line and "untrained" in line for line in lines)
    assert sum(line.startswith("│ ") for line in lines) == len(tasks) + 1  # and the average
    assert any(line.startswith("(turned, one row per column of report.csv") for line in lines)
    assert f"report.md / report.csv / plots in {location}" in lines or (
        f"report.md / report.csv in {location}" in lines
    )  # whole, however narrow the terminal


def test_a_suite_reports_markdown_has_the_run_cards_under_its_table():
    card = {"step": {"name": "trained", "unique_id": "T-1"}, "world_size": 2, "environment": {}}
    results = {"trained": {"copa": {**result(0.5), "run_card": card}}}
    report = build_suite_report(results, environment={"python": "3.11"}, step_times=[])
    assert report.run_cards == {"trained": card}
    table, cards = report.markdown().split("## Run card")
    assert "| trained | 0.5000 |" in table and "| trained | `T-1` |" in cards


def test_headers_and_titles_say_acc_only_where_the_numbers_are_acc(monkeypatch, capsys):
    """Exact match, F1 or bits per byte are named in their rows; the turned table's header and
    the in-loop plot's title do not call them acc."""
    from catwalk_steps.reports import plots

    def nq(value: float, **extra) -> dict:
        return {"exact_match,remove_whitespace": value, "n": 8, "task": "nq_open", **extra}

    points = [{"step": s, "exact_match,remove_whitespace": v, "count": 8} for s, v in [(2, 0.1)]]
    loop = {"train": [], "validation": [], "tasks": {"nq_open": points}}
    results = {
        "trained": {"nq_open": nq(0.5, training_history=loop), "arc_easy": result(0.5)},
        "untrained": {"nq_open": nq(0.0), "arc_easy": result(0.25)},
    }
    assert build_suite_report(results).details["shown"] == "acc, or as named"
    only_nq = {run: {"nq_open": by_task["nq_open"]} for run, by_task in results.items()}
    monkeypatch.setenv("COLUMNS", "60")
    print_report(build_suite_report(only_nq))  # turned: its header names what the rows are
    assert "task (as named)" in capsys.readouterr().out
    titles = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: titles.append(figure._suptitle))
    plots.plot_task_curves(build_suite_report(only_nq), None)
    assert titles[0].get_text() == "Task suite: in-loop scores (each panel's own) per task"


def test_a_sweep_cell_s_metric_has_one_format_whatever_its_spread():
    """A count the same in every seed is one number; every other metric is mean ± std, also
    when every seed gave the same value (an accuracy of 1 was printed `1`, a memory figure with
    the same spread `434.6 ± 0.0`)."""
    from catwalk_steps.reports.tables import Summary

    assert Summary.of([256, 256]).text() == "256"
    assert Summary.of([1.0, 1.0]).text() == "1.0000 ± 0.0000"
    assert Summary.of([434.6, 434.6]).text() == "434.6 ± 0.0"
    assert Summary.of([0.5, 0.7]).text() == "0.6000 ± 0.1414"
    assert Summary.of([0.5]).text() == "0.5000"


@pytest.mark.parametrize("columns", ["40", "80"])
def test_no_number_is_cut_however_narrow_the_terminal(monkeypatch, capsys, columns):
    """Off a terminal rich has 80 columns, and cut cells too wide for theirs ("0.86…",
    "rewards/accuraci…"): each number is whole on one line; a table too wide even turned comes
    in parts of its columns."""
    monkeypatch.setenv("COLUMNS", columns)
    runs = {
        f"beta={beta},lr=0.0005,seed={seed}": {
            "kind": "preference",
            "rewards/accuracies": 0.375 + beta / 10,
            "rewards/accuracies_stderr": 0.0123,
            "logps/chosen": -26.9755 - seed,
        }
        for beta in (0.1, 0.5, 1.0)
        for seed in (1, 2, 3)
    }
    print_report(build_report(runs, title="DPO sweep"))
    out = capsys.readouterr().out
    assert "…" not in out
    for run in runs.values():
        assert f"{run['rewards/accuracies']:.4f} ± 0.0123" in out
        assert f"{run['logps/chosen']:.4f}" in out
    assert ("(2 of " in out) == (columns == "40")
