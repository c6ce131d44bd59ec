"""Preference pairs: a prompt, the answer preferred and the one rejected, for DPO and its
variants (:mod:`catwalk_steps.kinds.preference`).

    {type: 'catwalk::preference', source: 'files', max_length: 512,
     data_files: {train: 'prefs_train.jsonl', validation: 'prefs_val.jsonl'}}

Rows are `{prompt, chosen, rejected}` as texts or in the chat form of the Hugging Face
preference sets (:mod:`.preference_rows`), from JSON lines / CSV / Parquet files (`source:
'files'`), a `datasets.save_to_disk` directory of splits (`source: 'datasets'`, `path`), or the
hub by name (`source: 'hub'`, `hub: {path, name}`, `split_names` for sets whose splits are
named otherwise, e.g. UltraFeedback's `train_prefs`). A bad row (a field missing, the same
answer twice, a prompt longer than `max_length` tokens) is one line naming its file and line,
when the step graph is built for files on disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from .base import ModelTokenizer, Task, TaskDataError
from .chat import ChatRenderer
from .preference_rows import checked_row, is_messages, rendered
from .sources import FileSource, HubSource, RowSource

SOURCES = ("files", "datasets", "hub")


@dataclass(frozen=True)
class PreferenceInstance:
    """A preference pair as texts: the answers continue the prompt as they are.

    :ivar reference: the reference model's summed log-probabilities of (chosen, rejected), where
        a `catwalk::reference_logprobs` step has computed them; None otherwise (a LoRA run's
        reference is its base with the adapter off)."""

    prompt: str
    chosen: str
    rejected: str
    reference: tuple[float, float] | None = None
    kind: ClassVar[str] = "preference"  # catwalk_steps.kinds.preference

    def pairs(self) -> list[tuple[str, str]]:
        """(prompt, answer) of each answer: what its size is counted from."""
        return [(self.prompt, self.chosen), (self.prompt, self.rejected)]


def prompt_key(tokenizer: Any, prompt: str) -> tuple[str, bool]:
    """How a prompt is tokenized: with the tokenizer's special tokens unless the text starts
    with its BOS (a chat template writes it: kept once)."""
    bos = tokenizer.bos_token if tokenizer.bos_token_id is not None else None
    return prompt, not (bos and prompt.startswith(bos))


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """A prompt's tokens (:func:`prompt_key`)."""
    text, special = prompt_key(tokenizer, prompt)
    return list(tokenizer([text], add_special_tokens=special)["input_ids"][0])


@Task.register("catwalk::preference")
class PreferenceTask(Task):
    """Preference pairs from files, a `datasets` directory or the hub (see the module).

    :param name: what reports call the task.
    :param source: "files" (`data_files`), "datasets" (`path`) or "hub" (`hub`).
    :param data_files: with source "files": `{split: path}` (JSON lines, CSV, Parquet, or a
        `datasets.save_to_disk` directory).
    :param path: with source "datasets": the directory `DatasetDict.save_to_disk` wrote.
    :param hub: with source "hub": `{path, name}` for `datasets.load_dataset`.
    :param split_names: `{split: the data's name for it}` (`{train: 'train_prefs', validation:
        'test_prefs'}`); left out, the same names.
    :param max_length: the tokens a prompt may have (the loader's `max_length`): a longer prompt
        leaves no room for its answers and is a bad row; None: not checked.
    :param max_instances: only the first N rows of each split.
    """

    kind = "preference"

    def __init__(
        self,
        name: str = "preference",
        source: str = "files",
        data_files: dict[str, str] | None = None,
        path: str | None = None,
        hub: dict[str, str] | None = None,
        split_names: dict[str, str] | None = None,
        max_length: int | None = None,
        max_instances: int | None = None,
    ):
        self.task_name, self.source_name = name, source
        where = f"task '{name}'"
        whole(max_length, f"{where}.max_length", optional=True)
        whole(max_instances, f"{where}.max_instances", optional=True)
        self.max_length, self.max_instances = max_length, max_instances
        self.split_names = dict(split_names or {})
        self.source = preference_source(name, source, data_files, path, hub)
        self.chat_rows = not isinstance(self.source, FileSource)  # unknown until loaded
        if isinstance(self.source, FileSource):  # known now: every row checked before a step
            for split in self.source.splits():
                rows = self.checked_rows(split)
                self.chat_rows |= any(is_messages(row[1]) for row, _ in rows)

    @property
    def name(self) -> str:
        return self.task_name

    @property
    def renders_chat(self) -> bool:
        """Whether the model's tokenizer is needed: to render chat rows (hub rows may be), or
        to count the prompts' tokens against `max_length`."""
        return self.chat_rows or self.max_length is not None

    def data_split(self, split: str) -> str:
        return self.split_names.get(split, split)

    def check_splits(self, splits: Sequence[str], field: str) -> None:
        for split in splits:
            self.source.require(self.data_split(split), f"{field}: task '{self.name}'")

    def describe(self, split: str) -> str:
        return f"task '{self.name}' ({self.source.describe(self.data_split(split))})"

    def checked_rows(self, split: str) -> list[tuple[tuple[Any, Any, Any], str]]:
        rows = self.source.rows(split, self.max_instances)
        wheres = [self.source.where(split, index) for index in range(len(rows))]
        return [(checked_row(row, where), where) for row, where in zip(rows, wheres, strict=True)]

    def check_tokenizer(self, tokenizer: ModelTokenizer) -> None:
        """The files' prompts rendered and counted with the model's tokenizer (one line for the
        first that does not fit)."""
        if isinstance(self.source, FileSource):
            for split in self.source.splits():
                self.instances(split, tokenizer)

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[Any]:
        return self.instances(self.data_split(split), tokenizer)

    def instances(self, split: str, tokenizer: ModelTokenizer | None) -> list[PreferenceInstance]:
        rows = self.checked_rows(split)
        renderer = self.renderer(tokenizer, any(is_messages(r[1]) for r, _ in rows))
        instances = []
        for row, where in rows:
            instance = PreferenceInstance(*rendered(row, renderer, where))
            if tokenizer is not None and self.max_length is not None:
                length = len(prompt_ids(tokenizer.tokenizer, instance.prompt))
                if length >= self.max_length:
                    raise TaskDataError(
                        f"{where}: the prompt has {length} tokens, and max_length "
                        f"{self.max_length} leaves no room for an answer after it"
                    )
            instances.append(instance)
        return instances

    def renderer(self, tokenizer: ModelTokenizer | None, chat: bool) -> ChatRenderer | None:
        if tokenizer is None or not chat:
            return None
        return ChatRenderer.checked(tokenizer.tokenizer, tokenizer.name, self.name, False)

    def det_hash_object(self) -> Any:
        return (
            "catwalk::preference",
            self.name,
            self.source.identity(),
            sorted(self.split_names.items()),
            self.max_length,
            self.max_instances,
        )


def preference_source(
    name: str,
    source: str,
    data_files: Mapping[str, str] | None,
    path: str | None,
    hub: Mapping[str, str] | None,
) -> RowSource:
    where = f"task '{name}'"
    if source == "files":
        return FileSource(dict(data_files or {}), name)
    if source == "datasets":
        if not path or not Path(path).expanduser().is_dir():
            raise ConfigurationError(
                f"{where}.path: source 'datasets' needs the directory DatasetDict.save_to_disk "
                f"wrote, got {path!r}"
            )
        root = Path(path).expanduser()
        splits = {p.name: str(p) for p in sorted(root.iterdir()) if (p / "state.json").is_file()}
        if not splits:
            raise ConfigurationError(f"{where}.path: {root}: no split directories in it")
        return FileSource(splits, name)
    if source == "hub":
        if not (hub or {}).get("path"):
            raise ConfigurationError(f"{where}: source 'hub' needs hub: {{path: ..., name: ...}}")
        assert hub is not None
        return HubSource(hub["path"], hub.get("name"), [])
    raise ConfigurationError(f"{where}.source: one of {', '.join(SOURCES)}, got {source!r}")
