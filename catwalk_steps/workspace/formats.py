"""How step results are stored, as data: a trained rank classifier as a Hugging Face directory,
a task's instances as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from tango.common import DatasetDict
from tango.common.aliases import PathOrStr
from tango.format import Format

from ..checkpoints.weights import read_model_info, write_model_info
from ..files import write_atomic, write_json_atomic
from ..kinds import kind_of, kind_of_record
from ..kinds.records import RECORDS
from ..scoring.rank_classifier import RankClassifier


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
        write_model_info(directory, artifact.objective, history, card, dpo=dpo)

    def read(self, dir: PathOrStr) -> RankClassifier:
        directory = Path(dir)  # (what cannot be read is said in one line by the step cache)
        info = read_model_info(directory)
        model = RankClassifier.from_directory(directory, info["objective"], info.get("dpo"))
        model.metrics_history = info["metrics_history"]
        model.run_card = info.get("run_card")  # absent in models trained before run cards
        return model


@Format.register("catwalk::instances")
class InstancesFormat(Format[DatasetDict]):
    """A task's splits of instances as one JSON file: data, never a pickle, so a cached (or
    shared) `catwalk::load_task` result cannot run code when it is read. Each instance is stored
    and read back by its kind (:meth:`~catwalk_steps.kinds.TaskKind.encode`, `decode`)."""

    VERSION = "001"
    FILE = "instances.json"

    def write(self, artifact: DatasetDict, dir: PathOrStr) -> None:
        payload = {
            "metadata": artifact.metadata,
            "splits": {
                name: [kind_of(instances).encode(instance) for instance in instances]
                for name, instances in artifact.splits.items()
            },
        }
        write_json_atomic(Path(dir) / self.FILE, payload)

    def read(self, dir: PathOrStr) -> DatasetDict:
        payload = json.loads((Path(dir) / self.FILE).read_text())
        try:
            splits = {
                name: [kind_of_record(row).decode(row, self.FILE) for row in rows]
                for name, rows in payload["splits"].items()
            }
        except KeyError as e:  # (a KeyError would say "not cached" to Tango's cache)
            raise ValueError(f"{self.FILE}: a stored instance has no {e}") from None
        return DatasetDict(splits=splits, metadata=payload["metadata"])


@Format.register("catwalk::json")
class PlainJsonFormat(Format[dict]):
    """A result as plain JSON. (Tango's own "json" format rebuilds objects named in the file,
    importing any module it names, so a replaced file could run code when read.)"""

    VERSION = "001"
    FILE = "data.json"

    def write(self, artifact: dict, dir: PathOrStr) -> None:
        write_json_atomic(Path(dir) / self.FILE, artifact)

    def read(self, dir: PathOrStr) -> dict:
        return json.loads((Path(dir) / self.FILE).read_text())


@Format.register("catwalk::evaluation")
class EvaluationFormat(PlainJsonFormat):
    """An evaluation's result: its metrics as plain JSON (`data.json`), and its per-document
    records (:mod:`catwalk_steps.kinds.records`) beside them as JSON lines (`records.jsonl`,
    one document a line), read back into the result. A result stored before records were
    (only `data.json`) reads back as it was."""

    VERSION = "001"
    RECORDS_FILE = "records.jsonl"

    def write(self, artifact: dict, dir: PathOrStr) -> None:
        records = artifact.get(RECORDS)
        metrics = {key: value for key, value in artifact.items() if key != RECORDS}
        if isinstance(records, list):
            lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
            path = Path(dir) / self.RECORDS_FILE
            write_atomic(path, lambda p: p.write_text(lines, encoding="utf-8"))
        super().write(metrics, dir)

    def read(self, dir: PathOrStr) -> dict:
        result = super().read(dir)
        path = Path(dir) / self.RECORDS_FILE
        if path.is_file():
            result[RECORDS] = read_records(path)
        return result


def read_records(path: Path) -> list[dict]:
    """The records of a `records.jsonl` (data: JSON, one record a line); a line that is no
    record is named."""
    records = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {number} is not JSON ({e.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
                raise ValueError(f"{path}: line {number} is not a document's record")
            records.append(record)
    return records
