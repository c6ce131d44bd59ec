"""The reports' plots show what the runs validated on (their run cards' `val_metric_name`),
titles fit their figure, and a single run's report plots its validation curve (once, with the
in-loop tasks: not again in a suite's report)."""

from __future__ import annotations

import json

import pytest

from catwalk_steps.reports import ReportFormat, build_report
from catwalk_steps.reports import plots as plots_module

from .conftest import EXPERIMENTS, TINY_DEMO, run_tango, step_result


def run(seed: int, val_metric_name: str | None) -> dict:
    """A trained cell's evaluation: acc and acc_norm apart, so the curve shows which it is."""
    points = [
        {"step": 10, "acc": 0.1, "acc_norm": 0.6 + 0.1 * seed, "loss": 1.0, "count": 8},
        {"step": 20, "acc": 0.2, "acc_norm": 0.9, "loss": 0.5, "count": 8},
    ]
    card = {"step": {"name": "trained", "unique_id": "T"}, "world_size": 1, "environment": {}}
    if val_metric_name is not None:
        card["val_metric_name"] = val_metric_name
    return {
        "acc": 0.2,
        "acc_norm": 0.9,
        "n": 8,
        "training_history": {"train": [], "validation": points},
        "run_card": card,
    }


@pytest.fixture
def drawn(monkeypatch) -> list[dict]:
    """What each plot drew: its axes' labels, title (as laid out) and lines, read before the
    figure is saved and closed."""
    figures: list[dict] = []
    save = plots_module._save

    def capture(figure, path):
        figure.tight_layout()
        renderer = figure.canvas.get_renderer()
        axes = figure.axes[0]
        title = axes.title
        figures.append(
            {
                "ylabel": axes.get_ylabel(),
                "title": title.get_text(),
                "title_right": title.get_window_extent(renderer).x1,
                "title_left": title.get_window_extent(renderer).x0,
                "width": figure.get_figwidth() * figure.dpi,
                "lines": [list(line.get_ydata()) for line in axes.get_lines()],
            }
        )
        save(figure, path)

    monkeypatch.setattr(plots_module, "_save", capture)
    return figures


def sweep_report(val_metric_name: str | None, title: str = "Sweep", cells=({"lr": 1},)):
    """Each cell of `cells` with seeds 1 and 2."""
    configs = {
        ",".join(f"{k}={v}" for k, v in sorted({**cell, "seed": seed}.items())): {
            **cell,
            "seed": seed,
        }
        for cell in cells
        for seed in (1, 2)
    }
    metrics = {name: run(config["seed"], val_metric_name) for name, config in configs.items()}
    return build_report(metrics, title=title, configs=configs)


def test_the_curve_and_the_final_plot_show_the_metric_the_runs_validated_on(tmp_path, drawn):
    report = sweep_report("acc_norm")
    assert plots_module.plot_curves(report, tmp_path / "curves.png")
    assert plots_module.plot_final(report, tmp_path / "final.png")
    curves, final = drawn
    assert curves["ylabel"] == "validation acc_norm" and "validation acc_norm" in curves["title"]
    assert curves["lines"] == [[pytest.approx(0.75), pytest.approx(0.9)]]  # acc_norm's mean
    assert final["ylabel"] == "acc_norm"


def test_a_card_from_before_val_metric_name_was_recorded_shows_acc(tmp_path, drawn):
    assert plots_module.plot_curves(sweep_report(None), tmp_path / "curves.png")
    assert drawn[0]["ylabel"] == "validation acc"
    assert drawn[0]["lines"] == [[pytest.approx(0.1), pytest.approx(0.2)]]


def test_a_long_title_is_wrapped_inside_the_figure(tmp_path, drawn):
    title = "LoRA sweep: rank x alpha x learning rate"  # sweep_lora's, and its cells
    cells = [{"alpha": 16, "lr": 0.01, "r": r} for r in (4, 8)]
    report = sweep_report("acc", title, cells)
    assert plots_module.plot_final(report, tmp_path / "final.png")
    assert plots_module.plot_curves(report, tmp_path / "curves.png")
    for figure in drawn:
        assert "\n" in figure["title"]
        assert figure["title_left"] >= 0 and figure["title_right"] <= figure["width"], figure


def test_a_single_run_s_report_plots_its_validation_curve(tmp_path):
    report = build_report({"trained": run(1, "acc"), "untrained": {"acc": 0.25, "n": 8}})
    ReportFormat().write(report, tmp_path)
    assert (tmp_path / "validation_acc.png").stat().st_size > 10_000
    assert not (tmp_path / "final_acc.png").exists()  # a sweep's, per configuration


@pytest.mark.slow
def test_the_run_card_records_what_validation_measured(tmp_path):
    """Through `tango run`: the demo validating on acc_norm; its report's card says so and its
    report plots the run's curve."""
    overrides = {**TINY_DEMO, "steps.trained.val_metric_name": "acc_norm"}
    run_tango(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "norm", overrides)
    report = step_result(tmp_path / "ws", "norm", "report")
    payload = json.loads((report / "report.json").read_text())
    assert payload["run_cards"]["trained"]["val_metric_name"] == "acc_norm"
    assert (report / "validation_acc.png").exists()


EXACT = "exact_match,remove_whitespace"


def trained_on(val_metric_name: str, points: list[dict], scores: dict) -> dict:
    card = {"step": {"name": "trained", "unique_id": "T"}, "world_size": 1, "environment": {}}
    return {
        **scores,
        "training_history": {"train": [], "validation": points},
        "run_card": {**card, "val_metric_name": val_metric_name},
    }


def test_a_chained_report_plots_the_metric_its_table_compares(tmp_path, drawn):
    """dpo_demo's `gen_report`: the base, SFT and DPO models answering the SFT task (exact
    match); the DPO model validated on its reward accuracy, which this report does not compare:
    its curve is left out, not plotted in the exact match's place (DPO's name sorts first)."""
    sft = trained_on(EXACT, [{"step": 50, EXACT: 0.5}, {"step": 100, EXACT: 0.9}], {EXACT: 0.9})
    dpo = trained_on("rewards/accuracies", [{"step": 60, "rewards/accuracies": 0.97}], {EXACT: 1})
    report = build_report({"base": {EXACT: 0.0, "n": 64}, "dpo": dpo, "sft": sft})
    assert plots_module.validation_metric(report, "acc") == EXACT
    assert plots_module.plot_curves(report, tmp_path / "curves.png")
    assert drawn[0]["ylabel"] == f"validation {EXACT}"
    assert drawn[0]["lines"] == [[pytest.approx(0.5), pytest.approx(0.9)]]  # SFT's curve only
