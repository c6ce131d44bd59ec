"""PIQA (Bisk et al., 2020): from the Hugging Face hub or from its distribution files on disk."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..remote import require_hub
from .base import ModelTokenizer, MultipleChoiceInstance, Task, TaskDataError, TaskInstance
from .reading import MAX_LINE_BYTES, TOO_LONG, fingerprint, iter_jsonl, iter_labels

logger = logging.getLogger(__name__)


PIQA_PROMPT = "Question: {goal}\nAnswer:"


def piqa_instance(row: Mapping[str, Any], label: Any, where: str) -> MultipleChoiceInstance:
    """Builds a PIQA instance from a row with `goal`, `sol1`, `sol2` and its 0/1 label.

    `where` names the row ("train.jsonl:12") in errors. Extra keys are ignored.
    """
    if not isinstance(row, Mapping):
        raise TaskDataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for field in ("goal", "sol1", "sol2"):
        if field not in row:
            raise TaskDataError(f"{where}: missing field '{field}'")
        if not isinstance(row[field], str):
            raise TaskDataError(
                f"{where}: field '{field}' must be a string, got {type(row[field]).__name__}"
            )
    if isinstance(label, bool) or label not in (0, 1):
        raise TaskDataError(f"{where}: field 'label' must be 0 or 1, got {label!r}")
    return MultipleChoiceInstance(
        context=PIQA_PROMPT.format(goal=row["goal"]),
        choices=(" " + row["sol1"], " " + row["sol2"]),
        label=int(label),
    )


def read_piqa_files(data_dir: Path, file_stem: str) -> list[MultipleChoiceInstance]:
    """Reads PIQA's original distribution files `<stem>.jsonl` and `<stem>-labels.lst`."""
    return list(iter_piqa_files(data_dir, file_stem))


def iter_piqa_files(data_dir: Path, file_stem: str) -> Iterator[MultipleChoiceInstance]:
    """PIQA's instances from its distribution files, each as its line and its label's are read
    (the two files side by side, one line of each in memory)."""
    data_path = data_dir / f"{file_stem}.jsonl"
    labels_path = data_dir / f"{file_stem}-labels.lst"
    for path in (data_path, labels_path):
        if not path.is_file():
            raise TaskDataError(f"{path}: file not found")
    rows, labels = iter_jsonl(data_path), iter_labels(labels_path)
    skipped, count = [], 0
    while (numbered := next(rows, None)) is not None and (labelled := next(labels, None)):
        (number, row), (label_number, label) = numbered, labelled
        count += 1
        if row is TOO_LONG:
            skipped.append(number)
            continue
        if isinstance(label, int) and label not in (0, 1):
            raise TaskDataError(
                f"{labels_path}:{label_number}: field 'label' must be 0 or 1, got {label}"
            )
        yield piqa_instance(row, label, f"{data_path}:{number}")
    row_count = count + (numbered is not None) + sum(1 for _ in rows)
    label_count = count + sum(1 for _ in labels)
    if row_count != label_count:
        raise TaskDataError(
            f"{labels_path}: {label_count} labels for {row_count} rows in {data_path.name}; "
            "the files must have one line per instance"
        )
    if skipped:
        logger.warning(
            "%s: skipped %d line(s) longer than %d bytes (line %s), with their labels",
            data_path,
            len(skipped),
            MAX_LINE_BYTES,
            ", ".join(map(str, skipped[:5])),
        )


@Task.register("catwalk::piqa")
class PiqaTask(Task):
    """PIQA (Bisk et al., 2020): a goal and two solutions, one of them physically sensible.

    With `data_dir`, reads the original distribution files (`train.jsonl` + `train-labels.lst`,
    `valid.jsonl` + `valid-labels.lst`); otherwise loads the parquet copy `hub_name` from the
    Hugging Face hub (as lm-evaluation-harness does; script-based copies no longer load).
    `file_stems` maps our split names to the file names on disk.
    """

    HUB_SPLITS = ("train", "validation", "test")

    def __init__(
        self,
        data_dir: str | None = None,
        hub_name: str = "baber/piqa",
        file_stems: Mapping[str, str] | None = None,
    ):
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        self.hub_name = hub_name
        self.file_stems = dict(file_stems or {"train": "train", "validation": "valid"})

    def describe(self, split: str) -> str:
        if self.data_dir is None:
            return f"{self.hub_name} (hub)"
        return str(self.data_dir / f"{self.file_stems.get(split, split)}.jsonl")

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[TaskInstance]:
        if self.data_dir is not None:
            if not self.data_dir.is_dir():
                raise TaskDataError(f"{self.data_dir}: PIQA data directory not found")
            if split not in self.file_stems:
                raise TaskDataError(
                    f"{self.data_dir}: unknown split '{split}' "
                    f"(known: {', '.join(sorted(self.file_stems))})"
                )
            return [*read_piqa_files(self.data_dir, self.file_stems[split])]
        return self._load_hub_split(split)

    def iter_split(
        self, split: str, tokenizer: ModelTokenizer | None = None
    ) -> Iterator[TaskInstance]:
        if self.data_dir is not None and self.data_dir.is_dir() and split in self.file_stems:
            return iter_piqa_files(self.data_dir, self.file_stems[split])
        return super().iter_split(split, tokenizer)

    def _load_hub_split(self, split: str) -> list[TaskInstance]:
        if split not in self.HUB_SPLITS:
            raise TaskDataError(
                f"{self.hub_name}: unknown split '{split}' (known: {', '.join(self.HUB_SPLITS)})"
            )
        import datasets

        require_hub(f"{self.hub_name} [{split}] (hub)")
        rows = datasets.load_dataset(self.hub_name, split=split)
        return [
            piqa_instance(row, row.get("label"), f"{self.hub_name}[{split}]:{index}")
            for index, row in enumerate(rows)
        ]

    def det_hash_object(self) -> Any:
        """Local files enter the cache key by content, so edited files are read again."""
        if self.data_dir is None or not self.data_dir.is_dir():
            return (self.hub_name, self.data_dir, sorted(self.file_stems.items()))
        paths = [
            path
            for stem in self.file_stems.values()
            for path in (self.data_dir / f"{stem}.jsonl", self.data_dir / f"{stem}-labels.lst")
            if path.is_file()
        ]
        return (str(self.data_dir), sorted(self.file_stems.items()), fingerprint(paths))
