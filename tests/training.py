"""Training jobs built in Python (no `tango run`), for tests of the loop, checkpoints and engines.

`run_training(job)` is what `catwalk::train` calls: one worker trains in this process, several
are spawned. Everything in a job must be picklable, so test callbacks live here, at module level.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import torch
from tango.common import DatasetDict, Lazy, Params
from tango.integrations.torch import DataLoader, Model, TrainCallback, TrainingEngine

from catwalk_steps.checkpoints.discovery import best_checkpoint
from catwalk_steps.checkpoints.weights import full_model_state
from catwalk_steps.distributed.devices import plan_devices
from catwalk_steps.distributed.rendezvous import Rendezvous
from catwalk_steps.rewards import Reward
from catwalk_steps.tasks.synthetic import SyntheticTask
from catwalk_steps.training.callbacks import HISTORY_FILE, RunMetrics
from catwalk_steps.training.job import Schedule, TrainingJob

from .conftest import TINY_GPT2

TINY_WITH_DROPOUT = {**TINY_GPT2, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}
BLOCKS = r"transformer\.h\.[0-9]+"


def dataset(train: int = 64, validation: int = 20) -> DatasetDict:
    task = SyntheticTask(seed=3, num_keys=8, num_attributes=4, num_choices=3)
    task.sizes = {"train": train, "validation": validation}
    return DatasetDict(splits=task.load(["train", "validation"]))


def model_spec(dropout: bool = False) -> dict:
    config = TINY_WITH_DROPOUT if dropout else TINY_GPT2
    return {
        "type": "catwalk::rank_classifier",
        "config": config,
        "tokenizer": "catwalk::byte_level",
    }


def loader(batch_size: int, shuffle: bool = True) -> Lazy:
    collate = {
        "type": "catwalk::collate",
        "tokenizer": "catwalk::byte_level",
        "max_length": 48,
    }
    params = {"type": "catwalk::sharded", "batch_size": batch_size, "shuffle": shuffle, "seed": 5}
    return Lazy(DataLoader, Params({**params, "collate_fn": collate}))


def engine(type: str = "catwalk::torch", optimizer: dict | None = None, **kwargs: Any) -> Lazy:
    optimizer = optimizer or {"type": "torch::AdamW", "lr": 3e-3}
    return Lazy(TrainingEngine, Params({"type": type, "optimizer": optimizer, **kwargs}))


def job(
    work_dir: Path,
    *,
    device_count: int = 2,
    global_batch: int = 8,
    train_steps: int = 8,
    checkpoint_every: int = 4,
    validate_every: int | None = 4,
    engine_block: Lazy | None = None,
    dropout: bool = False,
    callbacks: list[Lazy] | None = None,
    resume_from: Path | None = None,
    keep_checkpoints: bool = False,
    data: DatasetDict | None = None,
    model: dict | None = None,
) -> TrainingJob:
    """A small training job: the same global batch whatever `device_count`."""
    schedule = Schedule(
        model=Lazy(Model, Params(model or model_spec(dropout))),
        training_engine=engine_block or engine(),
        dataset_dict=data or dataset(),
        train_dataloader=loader(global_batch // device_count),
        validation_dataloader=loader(8, shuffle=False),
        train_steps=train_steps,
        checkpoint_every=checkpoint_every,
        validate_every=validate_every,
        log_every=1,
        seed=11,
        remove_stale_checkpoints=not keep_checkpoints,
    )
    return TrainingJob(
        step_id=f"test-{Path(work_dir).name}",
        step_name="trained",
        work_dir=Path(work_dir),
        model=schedule.model,
        training_engine=schedule.training_engine,
        dataset_dict=schedule.dataset_dict,
        train_dataloader=schedule.train_dataloader,
        validation_dataloader=schedule.validation_dataloader,
        callbacks=[*(callbacks or []), Lazy(RunMetrics)],
        schedule=schedule,
        devices=plan_devices(device_count, visible_gpus=0),
        rendezvous=Rendezvous(join_timeout_s=60, collective_timeout_s=60),
        include_package=("catwalk_steps",),
        resume_from=resume_from,
    )


def weights(work_dir: Path) -> dict[str, torch.Tensor]:
    """The trained model's weights: what `catwalk::train` loads as its result."""
    return full_model_state(best_checkpoint(Path(work_dir)))


def history(work_dir: Path) -> dict:
    import json

    return json.loads((Path(work_dir) / HISTORY_FILE).read_text())


MEASURED = ("tokens_per_s", "s_per_step", "peak_memory_mib")  # of the machine, not the run


def reproducible(metrics_history: dict) -> dict:
    """A metric history without what measures the machine at the time (throughput, memory)."""
    return {
        section: [{k: v for k, v in entry.items() if k not in MEASURED} for entry in entries]
        for section, entries in metrics_history.items()
    }


@TrainCallback.register("test::faults")
class Faults(TrainCallback):
    """For `tango run` tests: records each worker's pid; once, after `kill_step` steps, kills
    `rank`, or after `hold_step` steps holds it (the others wait in the next collective) until
    the test interrupts the run, so the run cannot finish first however loaded the machine is.
    Marker files make the rerun train through."""

    HOLD_S = 120.0  # the test's own timeouts end it well before

    def __init__(
        self,
        *args,
        pid_dir: str,
        kill_step: int | None = None,
        hold_step: int | None = None,
        rank: int = 1,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.pid_dir, self.rank = Path(pid_dir), rank
        self.kill_step, self.hold_step = kill_step, hold_step

    def pre_train_loop(self) -> None:
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        (self.pid_dir / f"rank{self.train_config.worker_id}").write_text(str(os.getpid()))

    def post_batch(self, step: int, epoch: int, batch_loss: float, batch_outputs: list) -> None:
        import time

        if self.train_config.worker_id != self.rank:
            return
        if step + 1 == self.kill_step and self.first_time("killed", step):
            os.kill(os.getpid(), signal.SIGKILL)
        if step + 1 == self.hold_step and self.first_time("held", step):
            time.sleep(self.HOLD_S)

    def first_time(self, marker: str, step: int) -> bool:
        path = self.pid_dir / marker
        if path.exists():
            return False
        path.write_text(str(step + 1))
        return True


@TrainCallback.register("test::says")
class Says(TrainCallback):
    """For `tango run` tests of the log receiver: rank 0 logs `text` (a worker's real record),
    writes the receiver's port to `<hold_dir>/ready` and holds until `<hold_dir>/go` appears
    (the others wait in the first collective), so that the test can write to the receiver
    while the run is sure to be listening."""

    def __init__(self, *args, text: str, hold_dir: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.text, self.hold_dir = text, Path(hold_dir)

    def pre_train_loop(self) -> None:
        import logging
        import time

        if self.train_config.worker_id != 0:
            return
        logging.getLogger(__name__).warning(self.text)
        ready = self.hold_dir / "ready"
        ready.with_suffix(".tmp").write_text(os.environ.get("TANGO_LOGGING_PORT", ""))
        ready.with_suffix(".tmp").replace(ready)
        deadline = time.monotonic() + Faults.HOLD_S
        while not (self.hold_dir / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.1)


def kill_at(step: int, rank: int, fault_dir: Path) -> Lazy:
    """`test::faults` for `run_training`: kills `rank` once, after `step` steps."""
    return Lazy(Faults, Params({"pid_dir": str(fault_dir), "kill_step": step, "rank": rank}))


@TrainCallback.register("test::base_unchanged")
class BaseUnchanged(TrainCallback):
    """For adapter runs: after training, every base weight (gathered whole from any engine)
    is bitwise the weight the base was built with; fails the run naming the first that is
    not, and writes `base_unchanged.json` (how many were compared) into the work directory."""

    def post_train_loop(self, step: int, epoch: int) -> None:
        import json

        from catwalk_steps.adapters.base import base_name
        from catwalk_steps.adapters.registry import is_adapter_weight
        from catwalk_steps.checkpoints.base_identity import classifier_in
        from catwalk_steps.scoring.rank_classifier import RankClassifier

        model = self.training_engine.model
        if any(type(p).__name__ == "DTensor" for p in model.parameters()):
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            state = get_model_state_dict(model, options=options)
        elif hasattr(model, "gather_full_optim_state_dict"):  # FairScale: gathers whole
            state = model.state_dict()
        else:
            state = getattr(model, "module", model).state_dict()
        if self.train_config.worker_id != 0:
            return
        classifier = classifier_in(model)
        base = RankClassifier(**classifier.base_spec).state_dict()
        compared = 0
        for name, value in state.items():
            if is_adapter_weight(name):
                continue
            if not torch.equal(value.cpu(), base[base_name(name)]):
                raise AssertionError(f"base weight {name} changed in training")
            compared += 1
        (self.work_dir / "base_unchanged.json").write_text(json.dumps({"compared": compared}))


@Reward.register("test::raising_reward")
class RaisingReward(Reward):
    """A reward with a bug: it raises on every completion (GRPO's one line from the workers)."""

    def __call__(self, instance, completion):
        raise ZeroDivisionError("division by zero in my reward")
