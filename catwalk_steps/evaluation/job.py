"""What an evaluation on several devices is: the model as each worker builds it, the instances,
the scoring settings, and where the workers run (the launcher's view, as for a training job)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tango.common import Lazy
from tango.integrations.torch import Model, TrainingEngine

from ..distributed.devices import DevicePlan
from ..distributed.placement import PlacedJob
from ..distributed.rendezvous import Rendezvous
from ..settings import EvaluationSettings  # noqa: F401  (the job's settings, re-exported)
from .journal import AnswerJournal


@dataclass
class EvaluationJob(PlacedJob):
    """Everything a worker needs to score its share; pickled to each local worker process."""

    AFTER_FAILURE: ClassVar[str] = (
        "run the step again: it scores only what the evaluation's records lack"
    )

    step_id: str
    step_name: str
    work_dir: Path
    model: Lazy[Model]
    engine: Lazy[TrainingEngine] | None
    instances: list[Any]
    batch_size: int
    max_length: int
    tokenizer: str
    precision: str
    devices: DevicePlan
    journal: AnswerJournal  # where each chunk's answers go, and which requests a chunk holds
    todo: list[int]  # the chunks still to score
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    include_package: tuple[str, ...] = ()

    def node_message(self) -> dict[str, Any]:
        """What node 0 tells the other nodes beside the step (data): the records' key (the
        model's content, the requests, the settings: theirs must be the same) and the chunks
        still to score."""
        return {"records": self.journal.key, "todo": list(self.todo)}
