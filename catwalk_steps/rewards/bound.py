"""A bound on a reward's time: a call that has not returned after `seconds` is stopped.

The mechanism is the interval timer (`setitimer(ITIMER_REAL)`) and a SIGALRM handler that
raises :class:`RewardTimeout` in the main thread, between two of the reward's Python
instructions: it stops a pure-Python function that loops forever, and a regular expression
caught in backtracking (`re` checks for signals while it matches). It cannot stop C code that
never returns to the interpreter, nor a reward that catches BaseException and goes on.

Rewards run in the training worker's main thread, as its loop does. Nothing else in the package
arms ITIMER_REAL or handles SIGALRM (the launcher and workers handle SIGTERM and SIGINT, the
die-with-launcher thread waits on a pipe); the handler and a timer armed before are put back
after each call all the same.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class RewardTimeout(BaseException):
    """Raised inside a reward that outlived its bound: a BaseException, so that a reward's own
    `except Exception` does not swallow it."""


def _alarm(signum: int, frame: object) -> None:
    raise RewardTimeout


def bounded(seconds: float, call: Callable[[], T]) -> T:
    """`call()`, stopped by :class:`RewardTimeout` if it has not returned after `seconds`.
    In the main thread only (the one SIGALRM reaches)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "rewards are scored in the main thread: their bound (reward_timeout) is a SIGALRM"
        )
    previous = signal.signal(signal.SIGALRM, _alarm)
    started, earlier = time.monotonic(), 0.0
    try:
        earlier, _ = signal.setitimer(signal.ITIMER_REAL, seconds)  # one shot: raised once
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:  # a raise in the inner `finally` (the alarm came as it began) still ends here
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
        if earlier > 0:
            left = earlier - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6))
