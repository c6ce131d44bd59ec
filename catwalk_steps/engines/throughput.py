"""Tokens per second, seconds per step and peak memory of the steps between two logged steps.

What counts: a window opens when the first step after a logged step gets its batch and closes
when the next logged step is logged, so it holds whole training steps (forward, backward,
optimizer step, the loading of all but its first batch) and no checkpoint writing; validation
inside a window is paused out. Tokens are what the batches' kind counts (the non-pad positions
of every sequence, each choice a sequence; a preference pair's prompt once and both answers),
summed over micro-batches and ranks. Memory is each rank's peak since its start:
the CUDA allocator's on a GPU worker, the process's resident set on a CPU worker, following the
worker's device, never whether CUDA is available.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

MIB = 2**20


def peak_memory_mib(device: torch.device) -> float:
    """This process's peak memory so far, in MiB, where the worker's tensors live."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / MIB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB else


class Throughput:
    """One rank's meter; :meth:`measure` is a collective (every rank calls it on logged steps)."""

    def __init__(
        self,
        device: torch.device,
        distributed: bool,
        tokens_of: Callable[[Any], int | None],
    ):
        """`tokens_of`: a micro-batch's token positions, as its kind counts them (None: it
        does not say, and tokens/s is left out)."""
        self.device, self.distributed, self.tokens_of = device, distributed, tokens_of
        self.reset()

    def reset(self) -> None:
        self.opened: float | None = None
        self.paused: float | None = None
        self.seconds = 0.0  # of closed stretches of this window
        self.steps = 0
        self.tokens: int | None = 0

    def step_started(self, micro_batches: list[Any]) -> None:
        if self.opened is None:
            self.opened = time.perf_counter()
        self.steps += 1
        for batch in micro_batches:
            tokens = self.tokens_of(batch)
            self.tokens = None if tokens is None or self.tokens is None else self.tokens + tokens

    def pause(self) -> None:
        """Validation starts: its time is not the training's."""
        if self.opened is not None and self.paused is None:
            self.paused = time.perf_counter()
            self.seconds += self.paused - self.opened

    def resume(self) -> None:
        if self.paused is not None:
            self.opened, self.paused = time.perf_counter(), None

    def measure(self) -> dict[str, Any]:
        """The window's figures, the same on every rank: global tokens/s, seconds per step, and
        each rank's peak memory; a new window opens."""
        seconds = self.seconds
        if self.opened is not None and self.paused is None:
            seconds += time.perf_counter() - self.opened
        tokens = -1.0 if self.tokens is None else float(self.tokens)
        figures = [seconds, tokens, peak_memory_mib(self.device)]
        mine = torch.tensor(figures, dtype=torch.float64, device=self.device)
        gathered = [mine]
        if self.distributed:
            gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
            dist.all_gather(gathered, mine)
        ranks = [r.tolist() for r in gathered]
        steps = max(self.steps, 1)
        self.reset()
        # Ranks wait for each other at every step, so they end a window together; one that began
        # it early (rank 0 opening W&B before the first step, say) waited for the last to begin.
        seconds = min(r[0] for r in ranks)
        window: dict[str, Any] = {"s_per_step": seconds / steps}
        if all(r[1] >= 0 for r in ranks) and seconds > 0:
            window["tokens_per_s"] = sum(r[1] for r in ranks) / seconds
        window["peak_memory_mib"] = {f"rank{i}": round(r[2], 1) for i, r in enumerate(ranks)}
        return window
