"""Preference pairs: a prompt, the answer preferred and the one rejected, for DPO and its
variants (:mod:`catwalk_steps.kinds.preference`).

    {type: 'catwalk::preference', source: 'files', max_length: 512,
     data_files: {train: 'prefs_train.jsonl', validation: 'prefs_val.jsonl'}}

Rows are `{prompt, chosen, rejected}` as texts or in the chat form of the Hugging Face
preference sets (:mod:`.preference_rows`), from JSON lines / CSV / Parquet files (`source:
'files'`), a `datasets.save_to_disk` directory of splits (`source: 'datasets'`, `path`), or the
hub by name (`source: 'hub'`, `hub: {path, name}`, `split_names` for sets whose splits are
named otherwise, e.g. UltraFeedback's `train_prefs`). A bad row (a field missing, the same
answer twice, a prompt longer than `max_length` tokens) is one line naming its file and line:
for files on disk, when the step graph is built if it is among each file's first
:data:`HEAD_ROWS` rows, else when the load step reads it (which reads every row, one at a time),
or, in a streamed split, when training meets it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from .base import ModelTokenizer, Task, TaskDataError
from .chat import ChatRenderer
from .file_rows import Row
from .preference_rows import checked_row, is_messages, rendered
from .sources import FileSource, HubSource, RowSource
from .streamed import Streaming

SOURCES = ("files", "datasets", "hub")
HEAD_ROWS = 100  # rows of each file checked when the step graph is built (the load step: all)


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
    :param streaming: `true` or `{shuffle_buffer: N}`: the `train` split streams, never stored,
        each row checked as it is met (Streaming data).
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
        streaming: bool | dict[str, int] | None = None,
    ):
        self.task_name, self.source_name = name, source
        where = f"task '{name}'"
        whole(max_length, f"{where}.max_length", optional=True)
        whole(max_instances, f"{where}.max_instances", optional=True)
        self.max_length, self.max_instances = max_length, max_instances
        self.split_names = dict(split_names or {})
        self.source = preference_source(name, source, data_files, path, hub)
        revision = (hub or {}).get("revision")
        train = self.data_split("train")
        self.streaming = Streaming.of(streaming, name, "train", self.source, train, revision)
        self.chat_rows = not isinstance(self.source, FileSource)  # unknown until loaded
        if isinstance(self.source, FileSource):  # its first rows checked now, every row loaded
            for split in self.source.splits():
                rows = self.checked_rows(split, self.head)
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

    @property
    def head(self) -> int:
        """The rows of each file checked when the step graph is built (the load step checks
        every row, as it reads them)."""
        return min(HEAD_ROWS, self.max_instances or HEAD_ROWS)

    def checked_rows(
        self, split: str, limit: int | None
    ) -> Iterator[tuple[tuple[Any, Any, Any], str]]:
        for row, where in self.source.iter_rows(split, limit):
            yield checked_row(row, where), where

    def check_tokenizer(self, tokenizer: ModelTokenizer) -> None:
        """The first rows' prompts of the files rendered and counted with the model's tokenizer
        (one line for the first that does not fit)."""
        if isinstance(self.source, FileSource):
            for split in self.source.splits():
                for _ in self.instances(split, tokenizer, self.head):
                    pass

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[Any]:
        return list(self.iter_split(split, tokenizer))

    def iter_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> Iterator[Any]:
        return self.instances(self.data_split(split), tokenizer, self.max_instances)

    def instances(
        self, split: str, tokenizer: ModelTokenizer | None, limit: int | None
    ) -> Iterator[PreferenceInstance]:
        """The pairs of `split` (its first `limit`) as their rows are read."""
        return self.stream_instances(self.source.iter_rows(split, limit), tokenizer)

    def stream_instances(
        self, rows: Iterable[Row], tokenizer: ModelTokenizer | None = None
    ) -> Iterator[PreferenceInstance]:
        """The pairs of rows as they come (a split read from its files, a streamed one):
        checked, chat rows rendered by the model's template, each prompt counted against
        `max_length`."""
        renderer = None
        for row, where in rows:
            checked = checked_row(row, where)
            if renderer is None and is_messages(checked[1]):
                renderer = self.renderer(tokenizer, True)
            instance = PreferenceInstance(*rendered(checked, renderer, where))
            if tokenizer is not None and self.max_length is not None:
                length = len(prompt_ids(tokenizer.tokenizer, instance.prompt))
                if length >= self.max_length:
                    raise TaskDataError(
                        f"{where}: the prompt has {length} tokens, and max_length "
                        f"{self.max_length} leaves no room for an answer after it"
                    )
            yield instance

    def renderer(self, tokenizer: ModelTokenizer | None, chat: bool) -> ChatRenderer | None:
        if tokenizer is None or not chat:
            return None
        return ChatRenderer.checked(tokenizer, self.name, False, rows=True)

    def det_hash_object(self) -> Any:
        return (
            "catwalk::preference",
            self.name,
            self.streaming.identity() if self.streaming else self.source.identity(),
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
