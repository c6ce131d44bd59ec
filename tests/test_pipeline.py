"""The main job (`make run`) through `tango run`, as a user runs it, in a temporary workspace."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from catwalk_steps.kinds.multiple_choice import metrics_from_scores
from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.tasks.synthetic import SyntheticTask

from .conftest import EXPERIMENTS, evaluate_library, history, run_tango, step_result

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def read_json(path: Path):
    return json.loads(path.read_text())


@pytest.fixture
def demo_run(main_job_run: Path) -> Path:
    """`make run`'s job as shipped (conftest): synthetic task, tiny GPT-2, FairScale FSDP with
    blocks wrapped, bf16, 2 processes."""
    return main_job_run


def test_demo_learns_the_synthetic_task(demo_run: Path):
    trained = read_json(step_result(demo_run, "first", "eval_trained") / "data.json")
    untrained = read_json(step_result(demo_run, "first", "eval_untrained") / "data.json")
    assert trained["n"] == untrained["n"] == 256
    assert trained["acc"] >= 0.9
    assert untrained["acc"] < 0.4  # chance is 0.25
    history = json.loads(
        (step_result(demo_run, "first", "trained") / "catwalk_model.json").read_text()
    )
    validations = history["metrics_history"]["validation"]
    assert [v["step"] for v in validations] == [100, 200]
    assert max(v["acc"] for v in validations) >= 0.9
    assert all(v["count"] == 256 for v in validations)
    logged = [entry["step"] for entry in history["metrics_history"]["train"]]
    assert logged == [1, *range(10, 201, 10)]  # Tango logs the first step and every 10th


def test_demo_wraps_the_blocks_its_regexes_name_and_says_nothing_of_left_out_blocks(
    demo_run: Path,
):
    log = (demo_run / "runs" / "first" / "out.log").read_text()
    assert "modules_to_wrap: left out" not in log


def test_demo_with_a_tiny_llama_wraps_its_blocks_and_trains(demo_run: Path, tmp_path: Path):
    """demo_fsdp.jsonnet with the model block replaced by a Llama config and its GPT-2 regexes
    taken out (`modules_to_wrap: null`, as if left out): the Llama blocks become the FSDP units,
    the terminal says so, and it trains (20 steps here, the training step alone; the whole demo
    reaches 1.00 as GPT-2 does: docs/results.md)."""
    llama = evaluate_library(tmp_path, "lib.models.tiny_llama")
    short = {"train_steps": 20, "validate_every": 20, "checkpoint_every": 20, "log_every": 1}
    output = run_tango(
        EXPERIMENTS / "demo_fsdp.jsonnet",
        demo_run,
        "llama",
        {
            "steps.trained.model": llama,
            "steps.trained.training_engine.modules_to_wrap": None,
            "steps.eval_untrained.model": llama,
            **{f"steps.trained.{key}": value for key, value in short.items()},
        },
        extra=("-s", "trained"),
    )
    assert (
        "training_engine.modules_to_wrap: left out, so the model's blocks (its "
        "_no_split_modules) are FSDP units: 2 x LlamaDecoderLayer"
    ) in output
    losses = [e["loss"] for e in history(demo_run, "llama", "trained")["train"]]
    assert len(losses) == 20 and all(map(math.isfinite, losses))
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])  # it learns
    assert 'Found output for step "data" in cache' in output  # only the model changed


def test_second_run_reuses_the_cache(demo_run: Path):
    output = run_tango(EXPERIMENTS / "demo_fsdp.jsonnet", demo_run, "second")
    assert "Starting step" not in output
    assert 'Found output for step "trained" in cache' in output
    # The report table is printed again (rows of the rich table, not the cache-hit log lines).
    assert re.search(r"│ trained +│ +1\.0000 ± 0\.0000 │", output), output[-3000:]
    assert re.search(r"│ untrained +│ +0\.\d{4} ± 0\.\d{4} │", output)
    assert step_result(demo_run, "second", "trained") == step_result(demo_run, "first", "trained")


def test_saved_model_reloads_outside_tango_with_the_same_scores(demo_run: Path):
    directory = step_result(demo_run, "first", "trained")
    lm = AutoModelForCausalLM.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    instances = SyntheticTask(seed=1).load(["validation"])["validation"]
    ours = score_choices(RankClassifier.from_directory(directory), instances, progress=False)
    for instance, row in list(zip(instances, ours, strict=True))[:20]:
        for choice, score in zip(instance.choices, row, strict=True):
            context_ids = tokenizer(instance.context, add_special_tokens=False)["input_ids"]
            choice_ids = tokenizer(choice, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([context_ids + choice_ids])
            with torch.no_grad():
                log_probs = lm(ids).logits[0].log_softmax(-1)
            start = len(context_ids)
            expected = sum(float(log_probs[p - 1, ids[0, p]]) for p in range(start, ids.shape[1]))
            assert score == pytest.approx(expected, rel=1e-5, abs=1e-5)
    reported = json.loads(
        (step_result(demo_run, "first", "eval_trained") / "data.json").read_text()
    )
    assert metrics_from_scores(instances, ours) == {
        k: reported[k] for k in ("acc", "acc_norm", "n")
    }


def test_report_is_written_as_markdown_and_csv(demo_run: Path):
    report = step_result(demo_run, "first", "report")
    markdown = (report / "report.md").read_text()
    assert "| run | acc | acc_norm | n | peak MiB | tokens/s |" in markdown
    assert "| trained |" in markdown
    assert markdown.index("## Run card") > markdown.index("| trained |")  # under the table
    csv_lines = (report / "report.csv").read_text().splitlines()
    assert csv_lines[0] == "run,acc,acc_stderr,acc_norm,acc_norm_stderr,n,peak MiB,tokens/s"
    assert {line.split(",")[0] for line in csv_lines[1:]} == {"untrained", "trained"}


def test_the_run_card_holds_the_numbers_the_run_ended_with(demo_run: Path):
    info = read_json(step_result(demo_run, "first", "trained") / "catwalk_model.json")
    final = info["run_card"]["final_metrics"]
    assert final == {"validation": info["metrics_history"]["validation"][-1]}
    assert final["validation"]["step"] == 200 and "acc_stderr" in final["validation"]
    markdown = (step_result(demo_run, "first", "report") / "report.md").read_text()
    acc = f"acc {final['validation']['acc']:.4f} ± {final['validation']['acc_stderr']:.4f}"
    assert f"- `trained`: validation at step 200: {acc}, " in markdown


def test_a_saved_model_is_readable_like_its_directory_and_an_export_keeps_the_run_card(
    demo_run: Path, tmp_path: Path
):
    from . import commands

    directory = step_result(demo_run, "first", "trained")
    modes = {
        path.name: path.stat().st_mode & 0o777 for path in directory.iterdir() if path.is_file()
    }
    assert len(set(modes.values())) == 1, modes  # model.safetensors was 0600, the rest 0644
    exported = tmp_path / "exported"
    export = Path(sys.executable).with_name("catwalk-export")
    done = commands.run([str(export), str(directory / "work"), str(exported)])
    assert done.returncode == 0, done.stderr
    card = json.loads((exported / "catwalk_model.json").read_text())["run_card"]
    assert card["step"]["name"] == "trained" and card["checkpoint"].endswith("step000000200")


NUMBER = re.compile(r"[+-]?\d+\.\d+|\d+")
# How far a shown figure may be from a fresh run's: accuracy, its standard error and the paired
# difference move with the machine's float order only (bf16 on 2 processes); `n` is exact. The
# training's peak MiB and tokens/s are the machine's own: shown, positive, not compared.
SHOWN_TOLERANCE = 0.05


def shape(line: str) -> str:
    """A line of the table with its figures taken out and rich's column padding collapsed (a
    wider number widens its column)."""
    line = NUMBER.sub("#", line.replace("MetricsReport-003-", "MetricsReport-"))
    line = re.sub(r"cache/MetricsReport-\w+", "cache/MetricsReport-<id>", line)
    line = re.sub(r"in \S+/cache/", "in workspace/cache/", line)
    return re.sub(r"([━─ ])\1+", r"\1", line.strip())


def test_the_readme_shows_what_make_run_prints(demo_run: Path):
    """The README's "It ends with:" block is what `make run` prints: the same lines in the same
    shape (title, columns, rows, ± cells, the paired lines, where the report is), the figures
    within SHOWN_TOLERANCE."""
    from .conftest import MAIN_JOB_OUTPUT, REPO

    readme = (REPO / "README.md").read_text()
    shown = re.search(r"It ends with:\n\n```\n(.*?)```", readme, re.S).group(1).splitlines()
    printed = (demo_run.parent / MAIN_JOB_OUTPUT).read_text().splitlines()
    start = next(i for i, line in enumerate(printed) if line.strip() == "Metrics")
    end = next(i for i, line in enumerate(printed) if line.startswith("report.md / report.csv"))
    printed = printed[start : end + 1]
    assert [shape(line) for line in shown] == [shape(line) for line in printed]
    for said, run in zip(shown, printed, strict=True):
        if "│" in said and NUMBER.search(said):  # a row: acc ± se, acc_norm ± se, n, peak, tokens/s
            said_cells, run_cells = said.split("│")[2:-1], run.split("│")[2:-1]
            for column, (a, b) in enumerate(zip(said_cells, run_cells, strict=True)):
                a_numbers, b_numbers = NUMBER.findall(a), NUMBER.findall(b)
                assert len(a_numbers) == len(b_numbers), (said, run)
                if column == 2:  # n
                    assert a_numbers == b_numbers, (said, run)
                elif column < 2:
                    for x, y in zip(a_numbers, b_numbers, strict=True):
                        assert abs(float(x) - float(y)) <= SHOWN_TOLERANCE, (said, run)
                else:
                    assert all(float(y) > 0 for y in b_numbers), run
        elif "paired" in said:
            for x, y in zip(NUMBER.findall(said), NUMBER.findall(run), strict=True):
                assert abs(float(x) - float(y)) <= SHOWN_TOLERANCE, (said, run)


def test_the_plan_lists_what_the_run_ran_and_finds_it_cached(demo_run: Path):
    """`catwalk-plan` of `make run`'s experiment (tests/test_plan.py) after the run: the steps
    it started, in the order it started them, with the ids it registered, each cached now, and
    no weight read for it (`-i tests.no_weights`, which refuses the read of the cached model a
    plan leaves alone); with the training changed, the data and the untrained evaluation cached
    and the rest to run."""
    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    from . import commands
    from .conftest import MAIN_JOB_OUTPUT
    from .test_plan import planned

    experiment = str(EXPERIMENTS / "demo_fsdp.jsonnet")
    steps = planned(experiment, "-w", str(demo_run))["steps"]
    started = re.findall(
        r'Starting step "([^"]+)"', (demo_run.parent / MAIN_JOB_OUTPUT).read_text()
    )
    assert [step["name"] for step in steps] == started
    registered = SharedLocalWorkspace(demo_run).registered_run("first").steps
    assert {s["name"]: s["unique_id"] for s in steps} == {
        name: info.unique_id for name, info in registered.items()
    }
    assert {step["state"] for step in steps} == {"cached"}
    trained = str(step_result(demo_run, "first", "trained"))
    control = commands.run([sys.executable, "-m", "tests.no_weights", trained], fresh=True)
    assert control.returncode == 1 and "WeightsRead: " in control.stderr, control.stderr
    longer = planned(experiment, "-w", str(demo_run), "-o", '{"steps.trained.train_steps": 300}')
    states = {step["name"]: step["state"] for step in longer["steps"]}
    assert states == {
        "data": "cached",
        "eval_untrained": "cached",
        "trained": "runs",
        "eval_trained": "runs",
        "report": "runs",
    }
