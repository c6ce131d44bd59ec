"""Included in a test's `tango run` (`-i tests.evaluation_faults`): stops an evaluation
after it has recorded a given number of chunks of answers, in the process that records them
(`tango run` itself on one device, a worker on several), and counts the chunks scored.

- `CATWALK_TEST_STOP_AFTER_CHUNKS=N`: after the N-th chunk this process writes, it sends
  itself `CATWALK_TEST_STOP_SIGNAL` (default SIGKILL), or with `hold` it waits there until it
  is killed (a node whose loss the test decides: its worker dies with its launcher);
- `CATWALK_TEST_CHUNKS_LOG=<file>`: one line per chunk written, from every process.
"""

from __future__ import annotations

import os
import signal
import time

from catwalk_steps.evaluation.journal import AnswerJournal

_write = AnswerJournal.write
_written = 0


def write(self: AnswerJournal, chunk: int, answers: list) -> None:
    global _written
    _write(self, chunk, answers)
    _written += 1
    log = os.environ.get("CATWALK_TEST_CHUNKS_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{chunk}\n")
    after = os.environ.get("CATWALK_TEST_STOP_AFTER_CHUNKS")
    if after and _written >= int(after):
        how = os.environ.get("CATWALK_TEST_STOP_SIGNAL", "SIGKILL")
        while how == "hold":
            time.sleep(1)
        os.kill(os.getpid(), getattr(signal, how))


AnswerJournal.write = write  # type: ignore[method-assign]
