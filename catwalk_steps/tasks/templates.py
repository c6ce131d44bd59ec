"""Templates that turn a data row into a prompt, its choices and the right answer, read exactly
as lm-evaluation-harness 0.4 reads a task's `doc_to_text`, `doc_to_choice` and `doc_to_target`,
so that a task of its YAML files can be written here unchanged.

A template is one of:

- the name of a field of the row (`question_stem`): that field's value;
- a Jinja2 template (`"Question: {{question}}\\nAnswer:"`), rendered with the row's fields;
- a number (`3`: the answer index) or, for choices, a list of strings (`["no", "yes"]`).

Then, as lm-evaluation-harness does: rendered choices are read as a Python list literal
(`"{{[sol1, sol2]}}"`); a text or target that renders as digits is an index (a text that is an
index means one context per choice: the choices are the contexts, the text names the right one,
the target is the shared continuation: WinoGrande); a target that is a string other than digits
is the right choice's text. Jinja has lm-evaluation-harness's settings (undefined fields are
errors, trailing newlines kept) and its `regex_replace` filter, plus `hellaswag_preprocess`, its
cleaning of HellaSwag's WikiHow artefacts.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta

FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def regex_replace(text: str, pattern: str, replacement: str, count: int = 0) -> str:
    """`re.sub` as a Jinja filter."""
    return re.sub(pattern, replacement, text, count=count)


def hellaswag_preprocess(text: str) -> str:
    """HellaSwag's cleaning (lm-evaluation-harness `hellaswag/utils.py`): WikiHow's ` [title]`
    becomes a sentence break, other bracketed tags go, double spaces become one."""
    cleaned = re.sub(r"\[.*?\]", "", text.strip().replace(" [title]", ". "))
    return cleaned.replace("  ", " ")


ENVIRONMENT = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
ENVIRONMENT.filters["regex_replace"] = regex_replace
ENVIRONMENT.filters["hellaswag_preprocess"] = hellaswag_preprocess


@lru_cache(maxsize=512)
def compiled(text: str) -> jinja2.Template:
    """A template compiled once per process (MMLU's 57 subjects share theirs)."""
    return ENVIRONMENT.from_string(text)


@lru_cache(maxsize=512)
def free_variables(text: str) -> frozenset[str]:
    return frozenset(meta.find_undeclared_variables(ENVIRONMENT.parse(text)))


SUBSTITUTION = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
JINJA_NAMES = {"true", "false", "none", "True", "False", "None"} | set(ENVIRONMENT.globals)


@lru_cache(maxsize=512)
def substitutions(text: str) -> tuple[str, ...] | None:
    """A template that is text and bare fields alone (`"Q: {{q}}\\nA:"`: most tasks' prompts)
    as its parts, text and field names alternating; None for any other (a filter, a block, an
    expression, a name Jinja reads itself). Rendered by :func:`substituted`, equal to Jinja's
    rendering and a tenth of its cost: the load step renders every row of a file."""
    parts = SUBSTITUTION.split(text)
    texts, names = parts[0::2], parts[1::2]
    if any(mark in t for t in texts for mark in ("{{", "{%", "{#")) or JINJA_NAMES & set(names):
        return None
    newlines = [t.replace("\r\n", "\n").replace("\r", "\n") for t in texts]  # (as Jinja reads)
    return tuple(part for pair in zip(newlines, [*names, ""], strict=True) for part in pair)[:-1]


def substituted(parts: tuple[str, ...], values: Mapping[str, Any]) -> str:
    """:func:`substitutions`' parts with each field's value as Jinja writes it (`str`); a
    field the row lacks is Jinja's error (StrictUndefined)."""
    out = list(parts)
    for index in range(1, len(parts), 2):
        if parts[index] not in values:
            raise jinja2.UndefinedError(f"'{parts[index]}' is undefined")
        out[index] = str(values[parts[index]])
    return "".join(out)


class TemplateError(ValueError):
    """A template that cannot be used, or a row it cannot be applied to."""


class Template:
    """One of a task's templates, compiled once.

    :param value: a field name, a Jinja2 template, a number or (choices) a list.
    :param role: "text", "choice", "target", "description" or "prompt" (a generative task's
        text or answer: never an index): how the result is read.
    """

    def __init__(self, value: Any, role: str):
        self.value, self.role = value, role
        self.compiled = None
        self.parts: tuple[str, ...] | None = None  # text and bare fields alone (substitutions)
        if isinstance(value, str) and not FIELD_NAME.fullmatch(value):
            try:
                self.compiled = compiled(value)
                self.parts = substitutions(value)
            except jinja2.TemplateSyntaxError as e:
                raise TemplateError(f"not a valid Jinja2 template ({e.message})") from None
        elif isinstance(value, bool) or not isinstance(value, (str, int, list)):
            raise TemplateError(f"expected a template string, got {type(value).__name__}")
        elif isinstance(value, int) and role not in ("text", "target"):
            raise TemplateError(f"a number is an answer index, not {role}s")
        elif isinstance(value, list) and role != "choice":
            raise TemplateError("a list gives the choices themselves")

    def fields(self) -> set[str]:
        """The row fields it reads (a bare name is a field; a template's free variables)."""
        if isinstance(self.value, str) and self.compiled is None:
            return {self.value}
        if self.compiled is None:
            return set()
        return set(free_variables(self.value))

    def reads_null(self, row: Mapping[str, Any]) -> bool:
        """Whether a field it reads is null in `row` (JSON null, a missing value)."""
        return any(row.get(field, "") is None for field in self.fields())

    def apply(self, row: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> Any:
        """The value for `row` (`extra`: variables beside the row's fields, which win)."""
        if isinstance(self.value, (int, list)):
            return self.value
        if self.compiled is None:
            return row[self.value]
        try:
            values = {**(extra or {}), **row}
            if self.parts is not None:
                rendered = substituted(self.parts, values)
            else:
                rendered = self.compiled.render(values)
        except jinja2.UndefinedError as e:
            raise TemplateError(str(e)) from None
        except Exception as e:  # a method call on a row value, an index out of range, ...
            raise TemplateError(f"{type(e).__name__}: {e}") from None
        return self.read(rendered)

    def read(self, rendered: str) -> Any:
        if self.role == "choice":
            try:
                return ast.literal_eval(rendered)
            except (ValueError, SyntaxError):
                raise TemplateError(
                    f"renders {rendered[:60]!r}, not a list of choices (write it as "
                    "'{{[field1, field2]}}' or name a list field)"
                ) from None
        if self.role in ("text", "target") and rendered.isdigit() and rendered.isascii():
            return int(rendered)
        return rendered
