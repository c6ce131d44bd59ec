"""Trackers (W&B, TensorBoard) and the throughput meter, without a training run: names, rows,
rank 0 only, resuming without repeated or missing steps, and the figures of a window."""

from __future__ import annotations

import json
import resource
from pathlib import Path
from typing import Any

import pytest
import torch
from tango.common import DatasetDict
from tango.integrations.torch import TrainConfig

from catwalk_steps.engines import throughput
from catwalk_steps.engines.throughput import Throughput
from catwalk_steps.kinds import default_kind, kind_named
from catwalk_steps.training.callbacks import RunMetrics
from catwalk_steps.training.trackers import TensorBoardTracker, Tracker, WandbTracker
from catwalk_steps.training.trackers.base import entry_scalars, history_rows
from catwalk_steps.training.trackers.wandb import wandb_api_key_found, wandb_mode

from .distributed import run_distributed

NO_DATA = DatasetDict(splits={"train": []})  # a training split of the default kind
TOKENS = default_kind().batch_tokens  # what a batch of multiple choice runs


def config(work_dir: Path, rank: int = 0, world_size: int = 1) -> TrainConfig:
    return TrainConfig(
        "test-step", work_dir, worker_id=rank, is_distributed=world_size > 1, world_size=world_size
    )


def test_entries_become_scalars_named_by_their_path_in_the_history():
    entry = {
        "step": 10,
        "loss": 2.5,
        "lr": 1e-3,
        "peak_memory_mib": {"rank0": 400.0, "rank1": 390.5},
        "piqa": {"acc": 0.5, "count": 3},  # a per-task metric, as in-loop evaluation adds them
        "note": "text",
        "flag": True,
        "bad": float("nan"),
    }
    assert entry_scalars("train", entry) == {
        "train/loss": 2.5,
        "train/lr": 1e-3,
        "train/peak_memory_mib/rank0": 400.0,
        "train/peak_memory_mib/rank1": 390.5,
        "train/piqa/acc": 0.5,
        "train/piqa/count": 3.0,
    }
    history = {"train": [{"step": 2, "loss": 1.0}], "validation": [{"step": 2, "acc": 0.5}]}
    assert list(history_rows(history)) == [(2, {"train/loss": 1.0, "validation/acc": 0.5})]


class Recorder(Tracker):
    """A tracker whose destination is a list; `holds` is the last step it already has."""

    def __init__(self, *args, holds: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.holds, self.rows, self.flushes, self.closed = holds, [], 0, False

    def open(self) -> int:
        return self.holds

    def write(self, step: int, row: dict[str, float]) -> None:
        self.rows.append((step, row))

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closed = True


def train(metrics: RunMetrics, tracker: Tracker, steps: range, validate: set[int]) -> None:
    """The hooks of the loop for `steps` (0-based), logging each; validation after `validate`."""
    for step in steps:
        for callback in (tracker, metrics):
            callback.pre_batch(step, 0, [])
        metrics.log_batch(step, 0, 10.0 - step, [])
        if step in validate:
            metrics.record_validation({"acc": 0.5, "acc_norm": 0.5, "loss": 0.5, "count": 2})
            metrics.post_val_loop(step, 0, 0.5, 0.5)


def tracked(tmp_path: Path, rank: int = 0, holds: int = 0) -> tuple[RunMetrics, Recorder]:
    metrics = RunMetrics(None, config(tmp_path, rank), None, NO_DATA, None)
    tracker = Recorder(None, config(tmp_path, rank), None, None, None, holds=holds)
    tracker.follow(metrics)
    return metrics, tracker


def test_one_row_per_step_with_its_validation_written_when_the_next_step_starts(tmp_path):
    metrics, tracker = tracked(tmp_path)
    tracker.pre_train_loop()
    train(metrics, tracker, range(4), validate={1, 3})
    assert [step for step, _ in tracker.rows] == [1, 2, 3]  # step 4 waits for what follows
    assert tracker.rows[1][1]["train/loss"] == 9.0
    assert tracker.rows[1][1]["validation/acc"] == 0.5
    assert "validation/acc" not in tracker.rows[0][1]
    assert set(tracker.rows[0][1]) >= {
        "train/loss",
        "train/s_per_step",
        "train/peak_memory_mib/rank0",
    }
    tracker.post_train_loop(3, 0)
    assert [step for step, _ in tracker.rows] == [1, 2, 3, 4] and tracker.closed


def test_other_ranks_write_nothing(tmp_path):
    metrics, tracker = tracked(tmp_path, rank=1)
    tracker.pre_train_loop()
    train(metrics, tracker, range(3), validate={2})
    tracker.post_train_loop(2, 0)
    assert tracker.rows == [] and not tracker.closed and tracker.flushes == 0


def test_a_checkpoint_writes_its_rows_first_and_a_resume_neither_repeats_nor_misses(tmp_path):
    metrics, tracker = tracked(tmp_path)
    tracker.pre_train_loop()
    train(metrics, tracker, range(4), validate={3})
    state = {"tracker": tracker.state_dict(), "metrics": metrics.state_dict()}  # checkpoint 4
    assert [step for step, _ in tracker.rows] == [1, 2, 3, 4]
    train(metrics, tracker, range(4, 6), validate=set())  # steps 5, 6 then a crash

    # The destination kept steps 1-2 (the rest was lost with the crash); training resumes at 4.
    metrics, tracker = tracked(tmp_path, holds=2)
    metrics.load_state_dict(state["metrics"])
    tracker.load_state_dict(state["tracker"])
    tracker.pre_train_loop()
    assert [step for step, _ in tracker.rows] == [3, 4]  # replayed from the restored history
    assert tracker.rows[1][1]["validation/acc"] == 0.5
    train(metrics, tracker, range(4, 8), validate=set())
    tracker.post_train_loop(7, 0)
    assert [step for step, _ in tracker.rows] == [3, 4, 5, 6, 7, 8]


# --- Throughput --------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def batch(lengths: list[int], width: int = 6) -> dict:
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    return {"input_ids": torch.zeros_like(mask), "attention_mask": mask}


def test_a_window_counts_real_tokens_over_training_time_without_validation(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(throughput.time, "perf_counter", clock)
    meter = Throughput(torch.device("cpu"), distributed=False, tokens_of=TOKENS)
    meter.step_started([batch([3, 5]), batch([6])])  # 14 tokens, grad_accum 2
    clock.now += 2.0
    meter.pause()  # validation: 10 s that are not training
    clock.now += 10.0
    meter.resume()
    meter.step_started([batch([2, 2])])  # 4 tokens
    clock.now += 1.0
    figures = meter.measure()
    assert figures["s_per_step"] == pytest.approx(1.5)
    assert figures["tokens_per_s"] == pytest.approx(18 / 3.0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert figures["peak_memory_mib"]["rank0"] == pytest.approx(peak, abs=50)
    meter.step_started([batch([1])])  # the next window starts afresh
    clock.now += 4.0
    assert meter.measure()["tokens_per_s"] == pytest.approx(1 / 4.0)


def test_batches_that_do_not_say_their_tokens():
    assert TOKENS({"input_ids": torch.zeros(2, 7)}) == 14  # no mask: every position
    assert TOKENS([1, 2, 3]) is None
    meter = Throughput(torch.device("cpu"), distributed=False, tokens_of=TOKENS)
    meter.step_started([[1, 2, 3]])
    assert "tokens_per_s" not in meter.measure()


def _two_ranks(rank: int, world_size: int, port: int) -> dict:
    from unittest import mock

    clock = Clock()
    with mock.patch.object(throughput.time, "perf_counter", clock):
        meter = Throughput(torch.device("cpu"), distributed=True, tokens_of=TOKENS)
        meter.step_started([batch([4] * (rank + 1))])  # rank 0: 4 tokens, rank 1: 8
        clock.now += 2.0 + rank  # rank 1 began early and waited a second for rank 0
        return meter.measure()


@pytest.mark.distributed
def test_figures_are_global_and_the_same_on_every_rank(tmp_path):
    figures = run_distributed(_two_ranks, tmp_path, world_size=2)
    assert figures[0] == figures[1]
    assert figures[0]["s_per_step"] == pytest.approx(2.0)
    assert figures[0]["tokens_per_s"] == pytest.approx(12 / 2.0)
    assert set(figures[0]["peak_memory_mib"]) == {"rank0", "rank1"}


def test_the_history_records_learning_rate_and_throughput(tmp_path):
    class Engine:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.25)

    metrics = RunMetrics(None, config(tmp_path), Engine(), NO_DATA, None)
    metrics.pre_batch(0, 0, [batch([2, 3])])
    Engine.optimizer.param_groups[0]["lr"] = 0.5  # a scheduler steps after the optimizer
    metrics.log_batch(0, 0, 1.5, [])
    [entry] = metrics.history["train"]
    assert entry["lr"] == 0.25  # the rate step 1 used
    assert entry["loss"] == 1.5 and entry["step"] == 1
    assert entry["tokens_per_s"] > 0 and entry["s_per_step"] > 0
    assert list(entry["peak_memory_mib"]) == ["rank0"]


# --- TensorBoard and W&B ------------------------------------------------------------------------


def tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def tensorboard(tmp_path: Path, resumed_at: int = 0, **kwargs) -> TensorBoardTracker:
    tracker = TensorBoardTracker(None, config(tmp_path), None, None, None, **kwargs)
    tracker.resumed_at = resumed_at
    tracker.written_through = tracker.open()
    return tracker


def test_tensorboard_resumes_with_every_step_once_from_the_run_the_checkpoint_continues(tmp_path):
    first = tensorboard(tmp_path)
    for step in range(1, 7):
        first.write(step, {"train/loss": float(step)})
    first.flush()  # then killed: steps 5 and 6 came after checkpoint 4
    second = tensorboard(tmp_path, resumed_at=4)
    assert second.written_through == 4
    for step in range(5, 9):
        second.write(step, {"train/loss": step + 0.5})
    second.close()
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 2
    assert tensorboard_scalars(tmp_path / "tensorboard")["train/loss"] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 4.0),
        (5, 5.5),
        (6, 6.5),
        (7, 7.5),
        (8, 8.5),
    ]


def test_tensorboard_names_a_directory_it_cannot_write(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(Exception, match=r"catwalk::tensorboard.log_dir: cannot write to .*file/tb"):
        tensorboard(tmp_path, log_dir=str(tmp_path / "file" / "tb"))


def wandb_records(work_dir: Path, record_type: str) -> list[tuple[str, Any]]:
    """Every record of `record_type` (`history`, `metric`) of every offline segment, in order:
    (file name, record)."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    found = []
    for path in sorted((work_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        store = datastore.DataStore()
        store.open_for_scan(str(path))
        while (data := store.scan_data()) is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            if record.WhichOneof("record_type") == record_type:
                found.append((path.name, record))
    return found


def wandb_history(work_dir: Path) -> list[tuple[str, int, dict]]:
    """Every history row of every offline segment, in order: (file name, step, row)."""
    return [
        (
            name,
            record.history.step.num,
            {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            },
        )
        for name, record in wandb_records(work_dir, "history")
    ]


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_wandb_offline_segments_of_one_run_hold_every_step_once(tmp_path, offline):
    import wandb

    def segment(resumed_at: int, steps: range) -> int:
        tracker = WandbTracker(None, config(tmp_path), None, None, None, project="p")
        tracker.resumed_at = resumed_at
        tracker.written_through = held = tracker.open()
        for step in steps:
            tracker.pending[step] = {"train/loss": float(step)}
        tracker.commit()
        tracker.close()
        wandb.teardown()  # the service has written everything before the next segment reads it
        return held

    assert segment(0, range(1, 5)) == 0
    assert segment(2, range(3, 8)) == 4  # resumed at 2, but the first segment holds 1-4
    rows = wandb_history(tmp_path)
    assert [step for _, step, _ in rows] == list(range(1, 8))
    run_id = json.loads((tmp_path / "wandb_run.json").read_text())["id"]
    assert {name for name, _, _ in rows} == {f"run-{run_id}.wandb"}  # one run
    assert len(list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}*"))) == 2  # 2 segments
    assert [row["train/loss"] for _, _, row in rows] == [float(s) for s in range(1, 8)]


def test_wandb_mode_and_credentials_as_wandb_finds_them(tmp_path, monkeypatch):
    for name in ("WANDB_MODE", "WANDB_DISABLED", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.chdir(tmp_path)
    assert wandb_mode(None) == "online" and not wandb_api_key_found()
    (tmp_path / "wandb").mkdir()
    (tmp_path / "wandb" / "settings").write_text("[default]\nmode = offline\n")  # `wandb offline`
    assert wandb_mode(None) == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode(None) == "disabled" and wandb_mode("online") == "online"
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    assert wandb_api_key_found()


def test_an_olmo_eval_labels_in_loop_metrics_are_tracked_by_name():
    """`tasks/<label>/<metric>`, each of olmo_eval's values a scalar of its own."""
    point = {"step": 4, "bpb_v1": 7.5, "bpb_v2": 7.25, "count": 5}
    history = {"train": [{"step": 4, "loss": 1.0}], "tasks": {"lambada_bpb_0shot": [point]}}
    assert list(history_rows(history)) == [
        (
            4,
            {
                "train/loss": 1.0,
                "tasks/lambada_bpb_0shot/bpb_v1": 7.5,
                "tasks/lambada_bpb_0shot/bpb_v2": 7.25,
                "tasks/lambada_bpb_0shot/count": 5.0,
            },
        )
    ]


def test_a_generative_tasks_in_loop_scores_are_tracked_under_lm_evals_keys():
    """`tasks/<task>/<metric>,<filter>`: each filter's score a scalar of its own."""
    point = {"step": 2, "exact_match,strict-match": 0.25, "exact_match,flexible-extract": 0.5}
    history = {"tasks": {"gsm8k": [{**point, "count": 4}]}}
    assert list(history_rows(history)) == [
        (
            2,
            {
                "tasks/gsm8k/exact_match,strict-match": 0.25,
                "tasks/gsm8k/exact_match,flexible-extract": 0.5,
                "tasks/gsm8k/count": 4.0,
            },
        )
    ]


def test_a_preference_batch_counts_each_prompt_once_and_both_answers():
    from catwalk_steps.kinds.preference_batches import preference_batch
    from catwalk_steps.scoring.tokenization import load_tokenizer
    from catwalk_steps.tasks.preference import PreferenceInstance

    tokenizer = load_tokenizer("catwalk::byte_level", "model.tokenizer")  # a byte a token
    pairs = [PreferenceInstance("Q: one?\nA:", " yes", " no"), PreferenceInstance("Q:", " a", "b")]
    batch = preference_batch(tokenizer, 64, pairs, [1.0, 1.0])
    # each answer ends with its end-of-text token, as TRL tokenizes a completion
    assert kind_named("preference").batch_tokens(batch) == (10 + 5 + 4) + (2 + 3 + 2)
