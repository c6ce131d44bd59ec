"""Tracker and history classes that time their own hooks, for bench/tracking_overhead.py (a
module of its own so that worker processes import it once, by name)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tango.integrations.torch import TrainCallback

from catwalk_steps.training.callbacks import RunMetrics
from catwalk_steps.training.trackers import TensorBoardTracker, WandbTracker

TIMINGS = "bench_timings.json"


class Timed:
    """Adds the seconds spent in the tracker's hooks to `spent` (rank 0 writes them at the end)."""

    HOOKS = ("record", "pre_batch", "state_dict", "post_train_loop")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls.HOOKS + ("pre_train_loop",):
            setattr(cls, name, timed(name, getattr(cls.__mro__[2], name)))

    spent: dict[str, float]


def timed(name, method):
    def wrapper(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            spent = self.__dict__.setdefault("spent", {})
            key = "open" if name == "pre_train_loop" else "hooks"
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - started
            if name == "post_train_loop" and self.main:
                path = Path(self.work_dir) / f"{type(self).__name__}.{TIMINGS}"
                path.write_text(json.dumps(spent))

    return wrapper


@TrainCallback.register("bench::wandb")
class TimedWandb(Timed, WandbTracker):
    pass


@TrainCallback.register("bench::tensorboard")
class TimedTensorBoard(Timed, TensorBoardTracker):
    pass


@TrainCallback.register("bench::run_metrics")
class TimedRunMetrics(RunMetrics):
    """The history's own cost: the throughput figures of logged steps (an all-gather)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.measure_s = 0.0
        measure = self.throughput.measure

        def timed_measure():
            started = time.perf_counter()
            try:
                return measure()
            finally:
                self.measure_s += time.perf_counter() - started

        self.throughput.measure = timed_measure

    def pre_train_loop(self):
        self.loop_started = time.perf_counter()

    def post_train_loop(self, step, epoch):
        super().post_train_loop(step, epoch)
        if self.train_config.worker_id == 0:
            loop_s = time.perf_counter() - self.loop_started
            timings = {"measure_s": self.measure_s, "loop_s": loop_s}
            (Path(self.work_dir) / f"RunMetrics.{TIMINGS}").write_text(json.dumps(timings))
