"""Each kind's instances as Arrow columns: the schema a stored split is written in, an instance
as a row, a row as the instance (equal to the one written). What a kind's `encode` / `decode`
do for one JSON record, as columns: a split of a million rows is one Arrow file, memory-mapped
when read, each instance decoded when it is asked for (:mod:`.stored`).

A field that is one thing or another is two columns, one of them null: a multiple-choice
instance's one context (`context`) or one per choice (`contexts`). A generative split's scoring
(its filters and metrics, the same for every request) is a dictionary column: stored once, one
index per row.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

import pyarrow as pa

from ..tasks.answers import AnswerScoring
from ..tasks.base import MultipleChoiceInstance
from ..tasks.generation import GenerationInstance
from ..tasks.olmo_eval_labels import OlmoEvalInstance
from ..tasks.preference import PreferenceInstance

TEXTS = pa.list_(pa.string())


def text_tuple(values: Any) -> tuple[str, ...]:
    return tuple(values)


@functools.lru_cache(maxsize=64)
def stored_scoring(source: str, where: str) -> AnswerScoring:
    """A split's requests share one scoring: read once."""
    return AnswerScoring.read(source, where)


class Columns:
    """A kind's instances as rows of :attr:`schema`."""

    schema: ClassVar[pa.Schema]

    def row(self, instance: Any) -> dict[str, Any]:
        """The instance as a row: {column: a value of its type, or None}."""
        raise NotImplementedError

    def instance(self, row: Mapping[str, Any], where: str) -> Any:
        """The instance a row holds (`where`: the stored file, for what it refers to)."""
        raise NotImplementedError


class MultipleChoiceColumns(Columns):
    schema = pa.schema(
        [
            ("context", pa.string()),  # one context every choice continues, or null
            ("contexts", TEXTS),  # one context per choice (WinoGrande), or null
            ("choices", TEXTS),
            ("label", pa.int64()),
            ("choice_chars", pa.list_(pa.int64())),
            ("subtask", pa.string()),
        ]
    )

    def row(self, instance: Any) -> dict[str, Any]:
        one = isinstance(instance.context, str)
        chars = instance.choice_chars
        return {
            "context": instance.context if one else None,
            "contexts": None if one else list(instance.context),
            "choices": list(instance.choices),
            "label": instance.label,
            "choice_chars": None if chars is None else list(chars),
            "subtask": instance.subtask,
        }

    def fields(self, row: Mapping[str, Any]) -> dict[str, Any]:
        chars = row["choice_chars"]
        return {
            "context": row["context"] if row["contexts"] is None else tuple(row["contexts"]),
            "choices": text_tuple(row["choices"]),
            "label": row["label"],
            "choice_chars": None if chars is None else tuple(chars),
            "subtask": row["subtask"],
        }

    def instance(self, row: Mapping[str, Any], where: str) -> Any:
        return MultipleChoiceInstance(**self.fields(row))


class OlmoEvalColumns(MultipleChoiceColumns):
    schema = pa.schema(
        [
            *MultipleChoiceColumns.schema,
            ("metric", pa.string()),
            ("unconditioned", pa.string()),
            ("conditioned", pa.bool_()),
        ]
    )

    def row(self, instance: Any) -> dict[str, Any]:
        own = {k: getattr(instance, k) for k in ("metric", "unconditioned", "conditioned")}
        return {**super().row(instance), **own}

    def instance(self, row: Mapping[str, Any], where: str) -> Any:
        own = {k: row[k] for k in ("metric", "unconditioned", "conditioned")}
        return OlmoEvalInstance(**self.fields(row), **own)


class GenerativeColumns(Columns):
    schema = pa.schema(
        [
            ("context", pa.string()),
            ("targets", TEXTS),
            ("until", TEXTS),
            ("max_gen_toks", pa.int64()),
            ("scoring", pa.dictionary(pa.int32(), pa.string())),  # its source (JSON), once
            ("answer", pa.string()),
            ("training", pa.bool_()),
            ("no_answer", pa.string()),
        ]
    )

    def row(self, instance: Any) -> dict[str, Any]:
        return {
            "context": instance.context,
            "targets": list(instance.targets),
            "until": list(instance.until),
            "max_gen_toks": instance.max_gen_toks,
            "scoring": instance.scoring.source,
            "answer": instance.answer,
            "training": instance.training,
            "no_answer": instance.no_answer,
        }

    def instance(self, row: Mapping[str, Any], where: str) -> Any:
        return GenerationInstance(
            context=row["context"],
            targets=text_tuple(row["targets"]),
            until=text_tuple(row["until"]),
            max_gen_toks=row["max_gen_toks"],
            scoring=stored_scoring(row["scoring"], where),
            answer=row["answer"],
            training=row["training"],
            no_answer=row["no_answer"],
        )


class PreferenceColumns(Columns):
    schema = pa.schema(
        [
            ("prompt", pa.string()),
            ("chosen", pa.string()),
            ("rejected", pa.string()),
            # The reference model's (chosen, rejected) log-probabilities, or null.
            ("reference", pa.list_(pa.float64())),
        ]
    )

    def row(self, instance: Any) -> dict[str, Any]:
        reference = instance.reference
        return {
            "prompt": instance.prompt,
            "chosen": instance.chosen,
            "rejected": instance.rejected,
            "reference": None if reference is None else list(reference),
        }

    def instance(self, row: Mapping[str, Any], where: str) -> Any:
        reference = row["reference"]
        return PreferenceInstance(
            prompt=row["prompt"],
            chosen=row["chosen"],
            rejected=row["rejected"],
            reference=None if reference is None else (reference[0], reference[1]),
        )
