"""Steps called directly (no `tango run`): their results and their configuration errors."""

from __future__ import annotations

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.steps.evaluate import Evaluate
from catwalk_steps.steps.load_task import LoadTask
from catwalk_steps.steps.report import MetricsReport
from catwalk_steps.tasks.synthetic import SyntheticTask

from .conftest import TINY_GPT2


@pytest.fixture(scope="module")
def data():
    return LoadTask(task=SyntheticTask(sizes={"train": 20, "validation": 12})).result()


@pytest.fixture(scope="module")
def model():
    return RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level")


def test_load_task_keeps_the_first_instances_when_asked():
    task = SyntheticTask(sizes={"train": 20, "validation": 12})
    data = LoadTask(task=task, max_instances=5).result()
    assert {name: len(split) for name, split in data.splits.items()} == {
        "train": 5,
        "validation": 5,
    }
    assert data["train"] == task.load(["train"])["train"][:5]


def test_evaluate_returns_the_three_metrics(data, model):
    """With their standard errors and the per-document records they come from."""
    metrics = Evaluate(model=model, dataset_dict=data, batch_size=5).result()
    errors = {"acc_stderr", "acc_norm_stderr"}
    assert set(metrics) == {"acc", "acc_norm", "n", "kind", "records", *errors}
    assert metrics["n"] == len(metrics["records"]) == 12
    assert metrics["kind"] == "multiple_choice"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"split": "test"},
            "evaluate.split: 'test' is not in the dataset (splits: train, validation)",
        ),
        # On the CPU whatever the machine has, so the error holds on GPU machines too.
        ({"precision": "fp16", "device": "cpu"}, "evaluate.precision: fp16 needs CUDA"),
        ({"precision": "half"}, "evaluate.precision: expected one of fp32, bf16, fp16"),
    ],
)
def test_evaluate_errors_name_the_field(data, model, kwargs, message):
    with pytest.raises(ConfigurationError) as error:
        Evaluate(model=model, dataset_dict=data, **kwargs).result()
    assert str(error.value).startswith(message)


def test_report_needs_runs_and_orders_columns():
    with pytest.raises(ConfigurationError, match="report.metrics: give at least one run"):
        MetricsReport(metrics={}).result()
    report = MetricsReport(
        metrics={"a": {"n": 3, "acc": 0.5, "extra": 1.0, "acc_norm": 0.25}}
    ).result()
    assert report.columns == ["acc", "acc_norm", "n", "extra"]
    assert report.markdown().splitlines()[2] == "| a | 0.5000 | 0.2500 | 3 | 1.0000 |"
    assert report.csv().splitlines() == ["run,acc,acc_norm,n,extra", "a,0.5,0.25,3,1.0"]


def test_keys_added_later_leave_the_ids_of_steps_that_do_not_set_them():
    """A cached result is found again after an upgrade: load_task's `tokenizer` and train's
    `val_metric_name` (now the task's first metric) left out give the ids they gave before."""
    from tango.step_graph import StepGraph

    from .conftest import EXPERIMENTS, experiment_params

    graph = StepGraph.from_params(experiment_params(EXPERIMENTS / "demo.jsonnet")["steps"])
    assert graph["data"].unique_id == "LoadTask-002-4peH9XeMn8VVDCc5H8WBScbDNLR4bGXB"
    # (the library's collate is `catwalk::collate` since it was renamed: another id, said)
    assert graph["trained"].unique_id == "TrainRankClassifier-003-3gmVn49s6NTNrAzPaRvcsPQavWvKiMpy"


def test_the_collates_old_name_builds_it_and_keeps_the_ids_it_gave():
    """`catwalk::multiple_choice`, the collate's name before it said what it does: an experiment
    that names it gets the same collator and the train step id it had (that of e8868a6)."""
    from tango.integrations.torch import DataCollator
    from tango.step_graph import StepGraph

    from catwalk_steps.kinds import Collator

    from .conftest import EXPERIMENTS, experiment_params

    assert DataCollator.resolve_class_name("catwalk::multiple_choice")[0] is Collator
    old = "catwalk::multiple_choice"
    loaders = ("train_dataloader", "validation_dataloader")
    named = {f"steps.trained.{loader}.collate_fn.type": old for loader in loaders}
    graph = StepGraph.from_params(experiment_params(EXPERIMENTS / "demo.jsonnet", named)["steps"])
    assert graph["trained"].unique_id == "TrainRankClassifier-003-2jF97Apubmz18HZG45BkkQ96gxQFTfyk"
