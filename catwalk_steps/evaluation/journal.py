"""An evaluation's answers written as they are computed, so that a killed evaluation resumes.

The requests are cut into chunks once, the same way whatever the device count: sorted by size
(as the workers deal them out) and cut every :data:`CHUNK_BATCHES` batches. A chunk is scored
whole by one worker (or in this process), and its answers go to a file of their own
(`<step's work dir>/answers/<key>/chunk-000012.json`, JSON: data, never a pickle) as soon as it
is done. A rerun of the step reads the chunks that are whole and scores only the others; the
metrics are then computed from the answers as read back from the files, in a resumed run and in
an uninterrupted one alike, so the two end with the same numbers, byte for byte.

The key names everything the answers depend on: the model's content (its files' SHA-256, or a
block that builds it), the requests, and the scoring settings that change a number (batch size,
`max_length`, precision, engine, device type). Another key's chunks (the weights changed, the
batch size did) are never read: they are removed. The device count is not in the key: a chunk
is the same requests scored on one device whatever the count, so a resume may change it.

Each chunk is written with the SHA-256 of its content (:func:`~catwalk_steps.sealed.
sealed_record`). A chunk file that does not read back whole (cut by the kill, damaged, edited
after it was written, another kind's answers, a planted pickle) costs that chunk: one line names
the file and it is scored again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..console import announce
from ..errors import first_line
from ..files import write_json_atomic
from ..sealed import sealed_record, unsealed_record

ANSWERS_DIR = "answers"
CHUNK_BATCHES = 16  # batches per chunk: at most this many batches per worker are scored again
FORMAT = 2  # 2: each chunk carries its SHA-256 (a chunk of 1 is another key's: scored again)

Check = Callable[[Any, Any], bool]  # (request, answer) -> whether the answer is one of its kind's


def as_data(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples as lists, floats as the same floats): the
    metrics are computed from this form in every run, resumed or not."""
    return json.loads(json.dumps(value))


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def chunks_of(order: Sequence[int], per_chunk: int) -> list[list[int]]:
    """Requests' indices, in scoring order, cut every `per_chunk`."""
    per_chunk = max(1, per_chunk)
    return [list(order[i : i + per_chunk]) for i in range(0, len(order), per_chunk)]


@dataclass(frozen=True)
class JournalKey:
    """What the answers depend on; its digest names the journal's directory."""

    model: str  # the model's content (:meth:`ModelSource.fingerprint`)
    requests: str  # SHA-256 of the requests as their kind stores them
    settings: Mapping[str, Any]  # batch size, length, precision, engine, device type, chunks

    def name(self) -> str:
        fields = {"format": FORMAT, "model": self.model, "requests": self.requests}
        return digest({**fields, "settings": dict(self.settings)})[:32]


class AnswerJournal:
    """The chunks of one evaluation's answers on disk (see the module)."""

    def __init__(self, work_dir: Path, key: JournalKey, chunks: list[list[int]]):
        self.root = Path(work_dir) / ANSWERS_DIR
        self.key = key.name()
        self.directory = self.root / self.key
        self.chunks = chunks

    def path(self, chunk: int) -> Path:
        return self.directory / f"chunk-{chunk:06d}.json"

    def start(self, requests: Sequence[Any], check: Check, log: logging.Logger) -> list[int]:
        """Removes other keys' journals; returns the chunks still to score (those not on disk
        whole), after one line on what a rerun found."""
        if self.root.is_dir():
            for other in self.root.iterdir():
                if other.name != self.key:
                    shutil.rmtree(other, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        done = [j for j in range(len(self.chunks)) if self.read(j, requests, check, log)]
        if done:
            scored = sum(len(self.chunks[j]) for j in done)
            announce(  # at the default log level, as a resumed training says so
                log,
                "Resuming the evaluation: %d of %d requests were scored by an earlier attempt "
                "(%s); scoring the other %d",
                scored,
                len(requests),
                self.directory,
                len(requests) - scored,
            )
        return sorted(set(range(len(self.chunks))) - set(done))

    def write(self, chunk: int, answers: list[Any]) -> None:
        record = {"key": self.key, "chunk": chunk, "indices": self.chunks[chunk]}
        write_json_atomic(self.path(chunk), sealed_record({**record, "answers": answers}))

    def read(
        self, chunk: int, requests: Sequence[Any], check: Check, log: logging.Logger | None = None
    ) -> list[Any] | None:
        """The chunk's answers when its file is whole and of this journal; None when it is
        missing, or damaged (then one line names the file, and it is removed)."""
        path = self.path(chunk)
        if not path.is_file():
            return None
        try:
            answers = self.answers_in(path, chunk, requests, check)
        except (OSError, ValueError) as e:
            if log is not None:
                log.warning("%s: not read, scored again (%s)", path, first_line(e))
            path.unlink(missing_ok=True)
            return None
        return answers

    def answers_in(
        self, path: Path, chunk: int, requests: Sequence[Any], check: Check
    ) -> list[Any]:
        record = json.loads(path.read_bytes())  # data only: a pickle is not JSON
        if not isinstance(record, dict) or record.get("key") != self.key:
            raise ValueError("not a record of this evaluation")
        record = unsealed_record(record)  # as it was written, or a ValueError
        indices = self.chunks[chunk]
        answers = record.get("answers")
        if record.get("chunk") != chunk or record.get("indices") != indices:
            raise ValueError("the record is of other requests")
        if not isinstance(answers, list) or len(answers) != len(indices):
            raise ValueError(f"{len(indices)} answers expected")
        for index, answer in zip(indices, answers, strict=True):
            if not check(requests[index], answer):
                raise ValueError(f"request {index}'s answer is not one its kind gives")
        return answers

    def collected(self, requests: Sequence[Any], check: Check) -> list[Any]:
        """Every request's answer, in input order, as read back from the chunks."""
        answers: list[Any] = [None] * len(requests)
        for chunk, indices in enumerate(self.chunks):
            read = self.read(chunk, requests, check)
            if read is None:
                raise RuntimeError(f"evaluation: {self.path(chunk)} is missing after scoring")
            for index, answer in zip(indices, read, strict=True):
                answers[index] = answer
        return answers

    def finish(self) -> None:
        """The step's result holds the answers now: its records are no longer needed."""
        shutil.rmtree(self.root, ignore_errors=True)
