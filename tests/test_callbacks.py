"""Validation metrics are exact over uneven batches and ranks; the history survives a resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tango.integrations.torch import TrainConfig

from catwalk_steps.training.callbacks import HISTORY_FILE, RunMetrics

from .distributed import run_distributed
from .test_trackers import NO_DATA


def outputs(
    correct: int, correct_norm: int, count: int, loss: float, padding: int = 0, **batch
) -> dict:
    """A batch of `count` instances (and `padding` that weighs 0) and what the model's forward
    returns for it: whether each pick is right (the first `correct`, `correct_norm` of them),
    the batch's mean loss."""

    def right(n: int) -> torch.Tensor:
        return torch.tensor([1.0] * n + [0.0] * (count + padding - n))

    weights = torch.tensor([1.0] * count + [0.0] * padding)
    returned = {"right": right(correct), "right_norm": right(correct_norm), "loss": loss}
    return {**returned, "weights": weights, **batch}


def callback(work_dir: Path, world_size: int = 1, rank: int = 0) -> RunMetrics:
    config = TrainConfig(
        "test", work_dir, worker_id=rank, is_distributed=world_size > 1, world_size=world_size
    )
    return RunMetrics(None, config, None, NO_DATA, None)


def scored(batches: list[dict], world_size: int = 1) -> dict:
    """The multiple-choice kind's metrics over batches whose forwards return `batches` (on
    this rank), as the loop validates a split (:func:`kind_metrics`)."""
    from catwalk_steps.kinds import Scorer, kind_named
    from catwalk_steps.training.in_loop import kind_metrics

    returned = iter(batches)
    scorer = Scorer(forward=lambda batch: next(returned), model=None)
    kind = kind_named("multiple_choice")
    return kind_metrics(kind, scorer, batches, [], torch.device("cpu"), world_size > 1, True)


def validate(metrics: RunMetrics, batches: list[dict], step: int = 9) -> dict:
    """One validation as the loop runs it: the callback told of each batch, then handed the
    kind's metrics, then the end of the validation loop."""
    for val_step in range(len(batches)):
        metrics.pre_val_batch(step, val_step, 0, None)
    result = scored(batches)
    metrics.record_validation(result)
    metrics.post_val_loop(step, 0, result["acc"], result["acc"])
    return result


def test_metrics_are_exact_over_uneven_batches_not_a_mean_of_batch_means(tmp_path):
    metrics = callback(tmp_path)
    # 3 of 4 right, then 0 of 1 right: the mean of batch accuracies would say 0.375.
    result = validate(metrics, [outputs(3, 2, 4, 0.5), outputs(0, 1, 1, 2.0)])
    assert result["acc"] == pytest.approx(3 / 5)
    assert result["loss"] == pytest.approx((0.5 * 4 + 2.0 * 1) / 5)
    assert result["acc_norm"] == pytest.approx(3 / 5)
    [entry] = metrics.history["validation"]
    assert entry == {
        "step": 10,
        "acc": 0.6,
        "acc_norm": 0.6,
        "loss": pytest.approx(0.8),
        "count": 5,
        # The sample standard error of five 0-or-1 values, three of them 1: sqrt(.6 x .4 / 4).
        "acc_stderr": pytest.approx((0.6 * 0.4 / 4) ** 0.5),
        "acc_norm_stderr": pytest.approx((0.6 * 0.4 / 4) ** 0.5),
    }


def test_a_forward_without_the_counts_says_which_model_to_use():
    from tango.common.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="returned no \\['right', 'right_norm'\\]"):
        scored([{"loss": torch.tensor(1.0), "count": torch.tensor(1.0)}])


def test_a_new_validation_starts_from_zero_and_history_is_written(tmp_path):
    import json

    metrics = callback(tmp_path)
    validate(metrics, [outputs(1, 1, 1, 1.0)], step=4)
    validate(metrics, [outputs(0, 0, 2, 1.0)], step=9)
    assert [v["acc"] for v in metrics.history["validation"]] == [1.0, 0.0]
    written = json.loads((tmp_path / HISTORY_FILE).read_text())
    assert written == metrics.history


def test_the_history_resumes_from_the_checkpointed_state(tmp_path):
    metrics = callback(tmp_path)
    metrics.log_batch(0, 0, 2.5, [])
    validate(metrics, [outputs(1, 1, 2, 1.0)], step=0)
    state = metrics.state_dict()
    metrics.log_batch(1, 0, 2.0, [])  # after the checkpoint: lost with the crash
    resumed = callback(tmp_path)
    resumed.load_state_dict(state)
    assert resumed.history == {
        "train": [metrics.history["train"][0]],
        "validation": [metrics.history["validation"][0]],
    }
    assert resumed.history["train"][0]["loss"] == 2.5


def uneven_ranks(rank, world_size, port, work_dir):
    # Rank 0 sees 4 instances in its two batches, rank 1 sees 3 (one zero-weight padding item).
    batches = {
        0: [outputs(2, 2, 2, 1.0), outputs(1, 0, 2, 3.0)],
        1: [outputs(0, 1, 2, 2.0), outputs(1, 1, 1, 4.0, padding=1)],
    }[rank]
    return scored(batches, world_size)


@pytest.mark.distributed
def test_metrics_are_exact_across_ranks(tmp_path):
    for result in run_distributed(uneven_ranks, tmp_path, str(tmp_path)):
        assert result["count"] == 7
        assert result["acc"] == pytest.approx(4 / 7)
        assert result["acc_norm"] == pytest.approx(4 / 7)
        assert result["loss"] == pytest.approx((2 + 6 + 4 + 4) / 7)


def grouped_ranks(rank, world_size, port, work_dir):
    # A grouped task's subjects a, b, c over two ranks: a only on rank 0, c only on rank 1 (and
    # in rank 1's zero-weight padding), b on both.
    batches = {
        0: [
            outputs(2, 1, 3, 1.0, subtasks=["a", "a", "b"]),
            outputs(0, 0, 2, 1.0, subtasks=["a", "b"]),
        ],
        1: [
            outputs(1, 1, 2, 1.0, subtasks=["b", "c"]),
            outputs(1, 0, 1, 1.0, padding=1, subtasks=["c", "c"]),
        ],
    }[rank]
    return scored(batches, world_size)


@pytest.mark.distributed
def test_a_grouped_tasks_error_bar_is_pooled_from_its_subtasks_across_ranks(tmp_path):
    """Each rank sums the subjects its share holds; the sums of all of them meet (a subject no
    instance of a rank's share belongs to counts 0 there) and the bar is lm-eval's pooled one."""
    from catwalk_steps.metrics.stderr import mean_stderr, pooled_stderr

    acc = {"a": [1.0, 1.0, 0.0], "b": [0.0, 0.0, 1.0], "c": [0.0, 1.0]}
    acc_norm = {"a": [1.0, 0.0, 0.0], "b": [0.0, 0.0, 1.0], "c": [0.0, 0.0]}
    for result in run_distributed(grouped_ranks, tmp_path, str(tmp_path)):
        assert result["count"] == 8 and result["acc"] == pytest.approx(4 / 8)
        for key, values in (("acc_stderr", acc), ("acc_norm_stderr", acc_norm)):
            parts = list(values.values())
            pooled = pooled_stderr([mean_stderr(v) for v in parts], [len(v) for v in parts])
            assert result[key] == pytest.approx(pooled), key
