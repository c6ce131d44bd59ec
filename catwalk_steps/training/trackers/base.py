"""What every experiment tracker (W&B, TensorBoard) shares: rank 0 writes, the others do nothing;
the run's metric history arrives entry by entry, by name; a resumed run neither repeats nor
misses a step.

Names are the history's: `train/loss`, `train/lr`, `train/tokens_per_s`, `train/s_per_step`,
`train/peak_memory_mib/rank0`, `validation/acc`, ...; a nested value (`{"piqa": {"acc": ...}}`)
becomes a path (`validation/piqa/acc`), so a metric added to the history reaches every tracker
with no change here. The entries of one step (the training entry, then its validation) are one
row, written when the next step starts, at a checkpoint, or at the end.

Resuming: a tracker states, when it opens, the last step its destination already holds; the
restored history is replayed after it (a tracker turned on for a resumed run gets the steps
before the checkpoint), and steps up to it are not written again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tango.integrations.torch import TrainCallback

from ...errors import is_number, one_line_error


@one_line_error
class TrackerError(RuntimeError):
    """A tracker that cannot write where it was told to; the message names the place."""


def scalars(prefix: str, values: Mapping[str, Any]) -> dict[str, float]:
    """Numbers by their path under `prefix`; nested mappings give longer paths."""
    out: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}/{key}"
        if isinstance(value, Mapping):
            out.update(scalars(name, value))
        elif is_number(value):
            out[name] = float(value)
    return out


def entry_scalars(section: str, entry: Mapping[str, Any]) -> dict[str, float]:
    """A history entry as named scalars; its `step` is the row's step, not a scalar."""
    return scalars(section, {key: value for key, value in entry.items() if key != "step"})


def history_rows(history: Mapping[str, Any]) -> Iterator[tuple[int, dict]]:
    """The history's entries merged into one row per step, in step order."""
    rows: dict[int, dict[str, float]] = {}
    sections = {key: value for key, value in history.items() if key != "tasks"}
    sections.update({f"tasks/{name}": v for name, v in history.get("tasks", {}).items()})
    for section, entries in sections.items():
        for entry in entries:
            rows.setdefault(int(entry["step"]), {}).update(entry_scalars(section, entry))
    yield from sorted(rows.items())


class Tracker(TrainCallback):
    """Base of the trackers: subclasses open, write rows, flush and close (rank 0 only)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.main = self.train_config.worker_id == 0  # global rank 0, on every node count
        self.pending: dict[int, dict[str, float]] = {}
        self.last_step = 0  # the last step recorded (on every rank)
        self.resumed_at = 0  # the last step of the checkpoint resumed from
        self.written_through = 0
        self.source: Any = None  # the RunMetrics whose history is replayed when resuming

    # --- What a tracker implements -------------------------------------------------------------

    def open(self) -> int:
        """Starts writing (`self.resumed_at` says where training resumed); returns the last
        step the destination already holds."""
        raise NotImplementedError

    def write(self, step: int, row: dict[str, float]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """After each batch of rows: make them visible and durable."""

    def close(self) -> None:
        """At the end of training."""

    # --- The loop's side -----------------------------------------------------------------------

    def follow(self, run_metrics: Any) -> None:
        self.source = run_metrics
        run_metrics.subscribe(self)

    def record(self, section: str, entry: Mapping[str, Any]) -> None:
        step = int(entry["step"])
        self.last_step = max(self.last_step, step)
        if not self.main:
            return
        if self.pending and step not in self.pending:
            self.commit()
        self.pending.setdefault(step, {}).update(entry_scalars(section, entry))

    def commit(self) -> None:
        if not (self.main and self.pending):
            return
        rows = sorted(self.pending.items())
        self.pending = {}
        fresh = [(step, row) for step, row in rows if step > self.written_through]
        for step, row in fresh:
            self.write(step, row)
        if fresh:
            self.written_through = fresh[-1][0]
            self.flush()

    def pre_train_loop(self) -> None:
        if not self.main:
            return
        self.written_through = self.open()
        if self.source is not None:
            self.pending = dict(history_rows(self.source.history))
            self.commit()

    def pre_batch(self, step: int, epoch: int, batch: list[Any]) -> None:
        self.commit()

    def post_train_loop(self, step: int, epoch: int) -> None:
        self.commit()
        if self.main:
            self.close()

    def state_dict(self) -> dict[str, Any]:
        self.commit()  # a checkpoint's rows are written before it is complete
        return {"step": self.last_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.resumed_at = self.last_step = int(state_dict.get("step", 0))


def connect_trackers(callbacks: list[Any]) -> None:
    """Subscribes every tracker to the run's metric history (the callback that keeps it)."""
    sources = [c for c in callbacks if hasattr(c, "subscribe") and hasattr(c, "history")]
    for tracker in (c for c in callbacks if isinstance(c, Tracker)):
        if sources:
            tracker.follow(sources[-1])
