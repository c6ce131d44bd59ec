"""Multiple-choice tasks and where they come from.

A task turns a source (the Hugging Face hub, files on disk, or a seed) into splits of
:class:`MultipleChoiceInstance`. Every source goes through the same row parser, so the hub and the
local path validate data the same way, and bad data fails with one line that names the file, the
line and the field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tango.common import Registrable
from tango.common.exceptions import ConfigurationError

from .errors import one_line_error

logger = logging.getLogger(__name__)


@one_line_error
class TaskDataError(ValueError):
    """Task data that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True)
class MultipleChoiceInstance:
    """One question: a context, its candidate continuations, and the index of the right one."""

    context: str
    choices: tuple[str, ...]
    label: int


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


MAX_LINE_BYTES = 1 << 20  # a PIQA row is well under 1 KiB; 1 MiB is not a question
TOO_LONG = object()  # a row skipped for its length (its label is skipped with it)


def _text_lines(path: Path):
    """(line number, text) of the non-blank lines; bytes that are not UTF-8 name the line, and
    a line longer than :data:`MAX_LINE_BYTES` is not decoded (None)."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if len(raw) > MAX_LINE_BYTES:
                yield number, None
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TaskDataError(
                    f"{path}:{number}: not UTF-8 text (byte {raw[e.start]:#04x} at column "
                    f"{e.start + 1}); save the file as UTF-8"
                ) from None
            if text.strip():
                yield number, text


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    rows = []
    for number, line in _text_lines(path):
        if line is None:
            rows.append((number, TOO_LONG))
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}:{number}: invalid JSON ({e.msg})") from None
    return rows


def _read_labels(path: Path) -> list[tuple[int, Any]]:
    labels = []
    for number, line in _text_lines(path):
        text = (line or "").strip()
        try:
            labels.append((number, int(text)))
        except ValueError:
            raise TaskDataError(
                f"{path}:{number}: field 'label' must be 0 or 1, got {text[:20]!r}"
            ) from None
    return labels


def read_piqa_files(data_dir: Path, file_stem: str) -> list[MultipleChoiceInstance]:
    """Reads PIQA's original distribution files `<stem>.jsonl` and `<stem>-labels.lst`."""
    data_path = data_dir / f"{file_stem}.jsonl"
    labels_path = data_dir / f"{file_stem}-labels.lst"
    for path in (data_path, labels_path):
        if not path.is_file():
            raise TaskDataError(f"{path}: file not found")
    rows = _read_jsonl(data_path)
    labels = _read_labels(labels_path)
    if len(rows) != len(labels):
        raise TaskDataError(
            f"{labels_path}: {len(labels)} labels for {len(rows)} rows in {data_path.name}; "
            "the files must have one line per instance"
        )
    instances = []
    skipped = [number for number, row in rows if row is TOO_LONG]
    if skipped:
        logger.warning(
            "%s: skipped %d line(s) longer than %d bytes (line %s), with their labels",
            data_path,
            len(skipped),
            MAX_LINE_BYTES,
            ", ".join(map(str, skipped[:5])),
        )
    for (number, row), (label_number, label) in zip(rows, labels, strict=True):
        if row is TOO_LONG:
            continue
        if isinstance(label, int) and label not in (0, 1):
            raise TaskDataError(
                f"{labels_path}:{label_number}: field 'label' must be 0 or 1, got {label}"
            )
        instances.append(piqa_instance(row, label, f"{data_path}:{number}"))
    return instances


def _fingerprint(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class Task(Registrable):
    """A multiple-choice task: loads named splits of instances."""

    @classmethod
    def from_params(cls, params_: Any, *args: Any, **kwargs: Any) -> Task:
        """Tango's construction, with a message that says what to do about keys of another
        task type (overriding only `type` keeps the old task's keys: replace the whole block)."""
        try:
            return super().from_params(params_, *args, **kwargs)  # type: ignore[misc]
        except ConfigurationError as e:
            extra = re.fullmatch(r"Extra parameters passed to (\w+): (.*)", str(e))
            if extra is None:
                raise
            raise ConfigurationError(
                f"task: {extra[1]} does not take {extra[2]}; when changing the task's type, "
                'replace the whole task block, e.g. -o \'{"steps.data.task": '
                '{"type": "catwalk::piqa", "data_dir": "/data/piqa"}}\''
            ) from None

    def load(self, splits: Sequence[str]) -> dict[str, list[MultipleChoiceInstance]]:
        """Returns each requested split, in order; an unknown or empty split is an error."""
        result = {}
        for split in splits:
            instances = self.load_split(split)
            if not instances:
                raise TaskDataError(f"{self.describe(split)}: split '{split}' is empty")
            result[split] = instances
        return result

    def load_split(self, split: str) -> list[MultipleChoiceInstance]:
        raise NotImplementedError

    def describe(self, split: str) -> str:
        """Where a split comes from, for error messages."""
        return f"{type(self).__name__} split '{split}'"


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

    def load_split(self, split: str) -> list[MultipleChoiceInstance]:
        if self.data_dir is not None:
            if not self.data_dir.is_dir():
                raise TaskDataError(f"{self.data_dir}: PIQA data directory not found")
            if split not in self.file_stems:
                raise TaskDataError(
                    f"{self.data_dir}: unknown split '{split}' "
                    f"(known: {', '.join(sorted(self.file_stems))})"
                )
            return read_piqa_files(self.data_dir, self.file_stems[split])
        return self._load_hub_split(split)

    def _load_hub_split(self, split: str) -> list[MultipleChoiceInstance]:
        if split not in self.HUB_SPLITS:
            raise TaskDataError(
                f"{self.hub_name}: unknown split '{split}' (known: {', '.join(self.HUB_SPLITS)})"
            )
        import datasets

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
        return (str(self.data_dir), sorted(self.file_stems.items()), _fingerprint(paths))


@Task.register("catwalk::synthetic")
class SyntheticTask(Task):
    """A multiple-choice task generated from a seed, learnable from scratch by a tiny model.

    The seed draws `num_keys` made-up words and gives each a hidden attribute word. A question asks
    for a key's attribute; the distractors are other attributes. Training and validation ask about
    the same keys with other distractors and other orders, so a model that learns the mapping
    generalises while chance stays at 1 / `num_choices`.
    """

    def __init__(
        self,
        seed: int = 0,
        num_keys: int = 24,
        num_attributes: int = 8,
        num_choices: int = 4,
        sizes: Mapping[str, int] | None = None,
    ):
        for field, value in (("num_keys", num_keys), ("num_attributes", num_attributes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"task.{field}: must be a whole number >= 1, got {value!r}"
                )
        if not 2 <= num_choices <= num_attributes:
            raise ConfigurationError(
                f"task.num_choices: must be between 2 and num_attributes ({num_attributes}), "
                f"got {num_choices}"
            )
        if num_keys + num_attributes > MAX_WORDS:
            raise ConfigurationError(
                f"task.num_keys + task.num_attributes: at most {MAX_WORDS} distinct made-up "
                f"words exist, got {num_keys} + {num_attributes}"
            )
        for split, size in (sizes or {}).items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ConfigurationError(
                    f"task.sizes.{split}: must be a whole number >= 0, got {size!r}"
                )
        self.seed = seed
        self.num_keys = num_keys
        self.num_attributes = num_attributes
        self.num_choices = num_choices
        self.sizes = dict(sizes or {"train": 2048, "validation": 256})
        rng = random.Random(seed)
        words = _made_up_words(rng, num_keys + num_attributes)
        self.keys = words[:num_keys]
        self.attributes = words[num_keys:]
        self.answer = {key: rng.randrange(num_attributes) for key in self.keys}

    def describe(self, split: str) -> str:
        return f"synthetic task (seed {self.seed})"

    def load_split(self, split: str) -> list[MultipleChoiceInstance]:
        if split not in self.sizes:
            raise TaskDataError(
                f"synthetic task: unknown split '{split}' (known: {', '.join(sorted(self.sizes))})"
            )
        rng = random.Random(f"{self.seed}/{split}")  # str seeds are hashed deterministically
        return [self._instance(rng) for _ in range(self.sizes[split])]

    def _instance(self, rng: random.Random) -> MultipleChoiceInstance:
        key = rng.choice(self.keys)
        right = self.answer[key]
        wrong = rng.sample(
            [a for a in range(self.num_attributes) if a != right], self.num_choices - 1
        )
        options = [right, *wrong]
        rng.shuffle(options)
        return MultipleChoiceInstance(
            context=f"Question: What goes with {key}?\nAnswer:",
            choices=tuple(" " + self.attributes[a] for a in options),
            label=options.index(right),
        )


CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"
MAX_WORDS = (len(CONSONANTS) * len(VOWELS)) ** 2  # two consonant-vowel syllables


def _made_up_words(rng: random.Random, count: int) -> list[str]:
    """`count` distinct two-syllable words; `count` must not exceed :data:`MAX_WORDS`."""
    consonants, vowels = CONSONANTS, VOWELS
    words: dict[str, None] = {}  # insertion-ordered set
    while len(words) < count:
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(2))
        words.setdefault(word)
    return list(words)
