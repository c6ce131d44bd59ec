"""What a training job is: its schedule, everything a worker needs, and where training stands.

The schedule is the `catwalk::train` step's settings, resolved once, and every later view of it
(Tango's `TrainConfig` for engines and callbacks) is computed from it, never copied by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tango.common import DatasetDictBase, Lazy
from tango.integrations.torch import DataLoader, Model, TrainCallback, TrainingEngine

from ..distributed.devices import DevicePlan
from ..distributed.placement import PlacedJob
from ..distributed.rendezvous import Rendezvous
from ..engines.train_config import NodeAwareTrainConfig
from ..kinds import kind_of
from ..kinds.stored import data_fingerprint
from ..objectives import objective_of
from ..settings import METRIC, TrainSettings
from ..tasks.streamed import is_streamed
from ..tokenized import StoredTokens, TokenizedSplit


@dataclass(frozen=True)
class Schedule(TrainSettings):
    """When to step, log, validate and checkpoint: a `catwalk::train` step's settings (each key
    declared and defaulted once, in :class:`~catwalk_steps.settings.TrainSettings`) as the job
    resolved them: the validation metric named (the validation split's kind's default when the
    key is left out), and `train_steps` known once the loop has its loader (`train_epochs`)."""

    val_metric_name: str = METRIC  # resolved for the validation split (`launch.plan`)

    @classmethod
    def of(cls, settings: TrainSettings, val_metric_name: str) -> Schedule:
        """`settings`, with the validation metric's name resolved."""
        return cls(**{**settings.as_mapping(), "val_metric_name": val_metric_name})

    @property
    def final_step(self) -> int:
        """The last step (0-based); `train_steps` is known once the loop has its loader."""
        assert self.train_steps is not None, "train_steps: resolved by the loop"
        return self.train_steps - 1

    def logs(self, step: int) -> bool:
        """Step `step` (0-based) is logged: the first, every `log_every`-th, the last."""
        return step == 0 or (step + 1) % self.log_every == 0 or step == self.final_step

    def validates(self, step: int) -> bool:
        if self.validation_split is None:
            return False
        every = self.validate_every is not None and (step + 1) % self.validate_every == 0
        return every or step == self.final_step

    def checkpoints(self, step: int) -> bool:
        return (step + 1) % self.checkpoint_every == 0 or step == self.final_step

    def better(self, value: float, than: float | None) -> bool:
        """`value` is at least as good as `than` (ties go to the later one, as in Tango)."""
        if than is None:
            return True
        return value <= than if self.minimize_val_metric else value >= than


@dataclass
class TrainingJob(PlacedJob):
    """Everything a worker needs to train; pickled to each local worker process."""

    step_id: str
    step_name: str
    work_dir: Path
    model: Lazy[Model]
    training_engine: Lazy[TrainingEngine]
    dataset_dict: DatasetDictBase
    train_dataloader: Lazy[DataLoader]
    validation_dataloader: Lazy[DataLoader] | None
    callbacks: list[Lazy[TrainCallback]]
    schedule: Schedule
    devices: DevicePlan
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    include_package: tuple[str, ...] = ()
    resume_from: Path | None = None
    workspace: Any = None  # handed to callbacks, as Tango does
    # In-loop task suite: {task name: instances}, scored whenever the job validates.
    evaluate_tasks: dict[str, list[Any]] = field(default_factory=dict)
    # The inner modules the engine wraps or recomputes, matched once on node 0 (None: each
    # worker matches its own model, as an engine built outside a job does).
    inner_modules: list[str] | None = None
    # What it trains on, recorded in each checkpoint's manifest: {"data": ..., "model": ...}
    # (:mod:`~catwalk_steps.checkpoints.run_identity`).
    identity: dict[str, Any] = field(default_factory=dict)
    # The training and validation splits' tokens, stored once (None: their batches tokenize
    # as they are made).
    tokens: StoredTokens | None = None
    validation_tokens: StoredTokens | None = None
    # GRPO's frozen reference (beta > 0, a full model: :mod:`.reference`); None: none.
    reference: Lazy[Model] | None = None

    def node_message(self) -> dict[str, Any]:
        """What node 0 tells the other nodes beside the step (data): its data's checksum (they
        read the data from the shared workspace, and check it is the same; a stored split's is
        read from its record, no row is read)."""
        return {"dataset_sha256": data_fingerprint(self.dataset_dict)}


@dataclass
class TrainerState:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0
    batches_into_epoch: int = 0  # of `epoch`, consumed by the steps taken
    val_metric: float | None = None
    best_val_metric: float | None = None
    best_checkpoint_metric: float | None = None
    best_checkpoint: str | None = None  # directory name


def train_config_for(job: TrainingJob, rank: int, local_rank: int) -> NodeAwareTrainConfig:
    """Tango's view of the job for one worker: the schedule's keys that Tango's `TrainConfig`
    also has, and where this worker stands among the others (the job's, whatever the keys
    said: its port, nodes and device)."""
    config_keys = {f.name for f in fields(NodeAwareTrainConfig)}
    schedule = {
        f.name: getattr(job.schedule, f.name) for f in fields(Schedule) if f.name in config_keys
    }
    return NodeAwareTrainConfig.of_worker(
        job,
        rank,
        local_rank,
        auto_aggregate_val_metric=False,
        **schedule,
    )


def task_name(data: Any) -> str:
    """The task a dataset was loaded from (`catwalk::load_task`'s metadata), for messages."""
    return getattr(data, "metadata", {}).get("task", "?")


def training_split(data: Any, schedule: TrainSettings) -> Any:
    """The training split as its kind trains on it (a generative task: each prompt with its
    answer; under an objective that samples its completions, the prompts alone); the job keeps
    the data as it was loaded (what other nodes check it against). A stored split stays one: no
    row is read here but the first; a streamed split as it is: its loader does that a batch at a
    time."""
    train = data[schedule.train_split]
    if is_streamed(train):
        return train
    if objective_of(schedule.model).samples:
        return train  # prompts: their completions are sampled in the loop (GRPO)
    where = f"train: task '{task_name(data)}', split '{schedule.train_split}'"
    return kind_of(train[:1]).training_instances(train, where)


def training_items(job: TrainingJob, schedule: Schedule) -> Sequence[Any]:
    """What the training loader collates: the training split, each instance with its stored
    tokens where the job has them (a streamed split has none: its loader tokenizes each
    batch)."""
    return with_tokens(training_split(job.dataset_dict, schedule), job.tokens)


def validation_items(job: TrainingJob, split: str) -> Sequence[Any]:
    """What the validation loader collates: the validation `split`, with its stored tokens
    where the job has them."""
    return with_tokens(job.dataset_dict[split], job.validation_tokens)


def with_tokens(split: Any, tokens: StoredTokens | None) -> Any:
    """`split` (read lazily), each item with its stored tokens (read when it is asked for)."""
    return split if tokens is None else TokenizedSplit(split, tokens)
