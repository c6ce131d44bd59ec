"""How step results are stored, as data: a trained rank classifier as a Hugging Face directory,
a task's instances as Arrow files, an evaluation's metrics and records as JSON. What feeds a number
(instances, metrics, records) is written with its SHA-256 and checked when read
(:mod:`catwalk_steps.sealed`): an edited file is one line naming it, never a number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tango.common import DatasetDict
from tango.common.aliases import PathOrStr
from tango.format import Format

from ..checkpoints.weights import read_model_info, write_model_info
from ..files import write_atomic, write_json_atomic
from ..metrics.records import RECORDS
from ..scoring.rank_classifier import RankClassifier
from ..sealed import read_checked, read_if_written, write_digests
from .instances import LEGACY, read_instances, write_instances


@Format.register("catwalk::hf_model")
class HFModelFormat(Format[RankClassifier]):
    """Stores a :class:`RankClassifier` as a Hugging Face `save_pretrained` directory.

    The step's result directory loads with `AutoModelForCausalLM.from_pretrained` and
    `AutoTokenizer.from_pretrained` outside Tango. `catwalk_model.json` beside the weights keeps
    the objective, the run's metric history (training loss, learning rate, throughput, memory,
    validation metrics) and its run card (config, versions, git commit, host, wall time).
    """

    VERSION = "001"

    def write(self, artifact: RankClassifier, dir: PathOrStr) -> None:
        directory = Path(dir)
        artifact.save_pretrained(directory)
        history, card = artifact.metrics_history, artifact.run_card
        dpo = artifact.spec.get("dpo")
        write_model_info(directory, artifact.objective.name, history, card, dpo=dpo)

    def read(self, dir: PathOrStr) -> RankClassifier:
        directory = Path(dir)  # (what cannot be read is said in one line by the step cache)
        info = read_model_info(directory)
        return RankClassifier.from_directory(
            directory,
            info["objective"],
            info.get("dpo"),
            metrics_history=info["metrics_history"],
            run_card=info.get("run_card"),  # absent in models trained before run cards
        )


@Format.register("catwalk::instances")
class InstancesFormat(Format[DatasetDict]):
    """A task's splits of instances, each one Arrow file in its kind's columns, memory-mapped
    when read and decoded an instance at a time (:mod:`.instances`): data, never a pickle, so a
    cached (or shared) `catwalk::load_task` result cannot run code when it is read. A result
    stored as one JSON file (`instances.json`, before splits were Arrow files) still reads
    back, whole."""

    # 001 still: a step's id holds its format's version, and results of either form read back
    # (the JSON form of 001 is told from the Arrow one by its files), so ids stay as they were.
    VERSION = "001"
    FILE = LEGACY

    def write(self, artifact: Any, dir: PathOrStr) -> None:
        write_instances(artifact, Path(dir))

    def read(self, dir: PathOrStr) -> DatasetDict:
        return read_instances(Path(dir))


@Format.register("catwalk::json")
class PlainJsonFormat(Format[dict]):
    """A result as plain JSON. (Tango's own "json" format rebuilds objects named in the file,
    importing any module it names, so a replaced file could run code when read.)"""

    VERSION = "001"
    FILE = "data.json"

    def write(self, artifact: dict, dir: PathOrStr) -> None:
        write_json_atomic(Path(dir) / self.FILE, artifact)
        write_digests(Path(dir), [self.FILE])

    def read(self, dir: PathOrStr) -> dict:
        return json.loads(read_checked(Path(dir) / self.FILE))


@Format.register("catwalk::evaluation")
class EvaluationFormat(PlainJsonFormat):
    """An evaluation's result: its metrics as plain JSON (`data.json`), and its per-document
    records (:mod:`catwalk_steps.metrics.records`) beside them as JSON lines (`records.jsonl`,
    one document a line), read back into the result; both with their SHA-256 (`digests.json`),
    so a records file deleted or edited since is one line naming it. A result stored before
    records were (only `data.json`) reads back as it was."""

    VERSION = "001"
    RECORDS_FILE = "records.jsonl"

    def write(self, artifact: dict, dir: PathOrStr) -> None:
        directory, written = Path(dir), [self.FILE]
        records = artifact.get(RECORDS)
        if isinstance(records, list):
            lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
            path = directory / self.RECORDS_FILE
            write_atomic(path, lambda p: p.write_text(lines, encoding="utf-8"))
            written.append(self.RECORDS_FILE)
        metrics = {key: value for key, value in artifact.items() if key != RECORDS}
        write_json_atomic(directory / self.FILE, metrics)
        write_digests(directory, written)

    def read(self, dir: PathOrStr) -> dict:
        result = super().read(dir)
        path = Path(dir) / self.RECORDS_FILE
        text = read_if_written(path)
        if text is not None:
            result[RECORDS] = read_records(path, text.decode("utf-8"))
        return result


def read_records(path: Path, text: str) -> list[dict]:
    """The records of a `records.jsonl` (data: JSON, one record a line), its `text` as read
    and checked; a line that is no record is named."""
    records = []
    lines = text.split("\n")  # (not `splitlines`: a record's text may hold U+2028)
    for number, line in enumerate(lines[:-1] if lines[-1] == "" else lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: line {number} is not JSON ({e.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
            raise ValueError(f"{path}: line {number} is not a document's record")
        records.append(record)
    return records
