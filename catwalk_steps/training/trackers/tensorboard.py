"""`catwalk::tensorboard`: the run's metric history as TensorBoard scalars.

Written with `torch.utils.tensorboard` to `<work dir>/tensorboard/` (or `log_dir`). A resumed
run opens a new event file with `purge_step` at the first step after its checkpoint: TensorBoard
then hides what the interrupted run wrote from that step on, so every step appears once, with
the values of the run that the checkpoint continues. `tensorboard --logdir <dir>` shows it live.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tango.integrations.torch import TrainCallback

from ...checkpoints.layout import RUN_CARD_FILE
from .base import Tracker, TrackerError

TENSORBOARD_DIR = "tensorboard"
EVENT_FILES = "events.out.tfevents.*"


def check_writable(directory: Path, key: str) -> None:
    """Creates `directory` and a file in it, or fails in one line naming it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
            pass
    except OSError as e:
        raise TrackerError(
            f"{key}: cannot write to {directory} ({e.strerror or e}); give a writable log_dir"
        ) from None


@TrainCallback.register("catwalk::tensorboard")
class TensorBoardTracker(Tracker):
    """Writes every logged step's scalars (loss, learning rate, tokens/s, seconds per step,
    peak memory per rank) and every validation's metrics, on rank 0.

    :param log_dir: where the event files go; default `<work dir>/tensorboard`.
    :param flush_secs: TensorBoard's own flush interval; rows are also flushed as they are
        written (at most once a step).
    """

    def __init__(
        self, *args: Any, log_dir: str | None = None, flush_secs: int = 30, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.log_dir = Path(log_dir) if log_dir else Path(self.work_dir) / TENSORBOARD_DIR
        self.flush_secs = flush_secs
        self.writer: Any = None

    def open(self) -> int:
        from torch.utils.tensorboard import SummaryWriter

        check_writable(self.log_dir, "catwalk::tensorboard.log_dir")
        earlier = any(self.log_dir.glob(EVENT_FILES))
        self.writer = SummaryWriter(
            str(self.log_dir),
            purge_step=self.resumed_at + 1 if earlier else None,
            flush_secs=self.flush_secs,
        )
        if not earlier:
            self.write_run_card()
        return self.resumed_at if earlier else 0

    def write_run_card(self) -> None:
        """The run card as text (TensorBoard's Text tab), once per run."""
        card = Path(self.work_dir) / RUN_CARD_FILE
        if card.is_file():
            text = json.dumps(json.loads(card.read_text()), indent=2)
            self.writer.add_text("run_card", f"```\n{text}\n```", global_step=0)

    def write(self, step: int, row: dict[str, float]) -> None:
        for tag, value in row.items():
            self.writer.add_scalar(tag, value, global_step=step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
