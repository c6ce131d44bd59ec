"""Errors on `tango run`'s terminal in one line, from its first moment.

Tango logs every failure with its traceback (`log_exc_info` in tango/common/logging.py, used by
its `sys.excepthook` and its executor): a wall of 30-110 lines with the cause at the end. Here
a filter on the terminal's handlers (:class:`OneLineOnTheTerminal`) shows an error that one line
says all of as `Type: message`; the run's log file (`<workspace>/runs/<run>/out.log`) keeps the
traceback, as it keeps those of failed workers (logger `catwalk_steps.traceback`, which the
terminal skips). `--log-level debug` or CATWALK_TRACEBACKS=1 shows tracebacks on the terminal
as before.

Which errors: what can be told before `catwalk_steps` is imported, because Tango evaluates the
experiment before it imports the package (:func:`early_line`: our jsonnet library's `catwalk:`
errors, jsonnet that does not parse in the experiment or in `-o`, an `-o` key the experiment
does not have, Tango's type check of a value; and Tango's own check of a `-s` step's name), and,
once the package is imported, every error type it registers (:func:`catwalk_steps.errors.one_line`).
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import re
import sys
import traceback
from typing import Any

from .patching import patch

DROPS = "records a handler cannot write dropped"
TRACEBACK_LOGGER = "catwalk_steps.traceback"
# What a `catwalk: ...` error in our jsonnet library looks like once jsonnet has raised it.
JSONNET_CATWALK = re.compile(r"runtime error: catwalk: (.*)", re.IGNORECASE)
# Tango's own type check of a config value: "Expected device_count to be int, found 2 (...)",
# and its override check below: Tango 1.3.2 raises them as plain TypeError and ValueError with no
# field naming the key, so their text is parsed (tests/test_tango_compat.py fails when it changes;
# an unparsed message is then shown as Tango's own).
TANGO_TYPE = re.compile(r"Expected (\w+) to be (\w+), found (.*) \(<class '(\w+)'>\)\.?")
UNUSED_OVERRIDES = re.compile(r"overrides dict contains unused keys: \[(.*)\]")
# `tango run -s NAME` naming no step of the experiment: Tango 1.3.2 asserts it (a traceback).
UNKNOWN_STEP = re.compile(
    r"You want to run a step called '(.*)', but it cannot be found in the experiment config\. "
    r"The config contains: \[(.*)\]\.?"
)
LOCATION = re.compile(r"(\S*:\d+:\d+(?:-\d+:\d+|-\d+)?)")
# JSON in an `--ext-var` that does not parse, in our library's `ext_json` (catwalk_steps/
# jsonnet/lib/grid.libsonnet), which reads the variable as a field of its name so that the
# trace names it.
JSONNET_EXT_JSON = re.compile(
    r"failed to parse json: (.*)\n.*\n"
    r"\s*\S+\s+field <(\w+)> access\n\s*\S+\s+function <ext_json> call"
)


def first_line(error: BaseException) -> str:
    """A one-line reason from a library error whose message may span many lines."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def chain(error: BaseException) -> list[BaseException]:
    """The error and its causes, outermost first, as Python prints them: the explicit cause,
    else the context unless `raise ... from None` suppressed it."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        if current.__cause__ is not None:
            current = current.__cause__
        else:
            current = None if current.__suppress_context__ else current.__context__
    return seen


def raised_in(error: BaseException, *functions: str) -> bool:
    """Whether a frame of the error's traceback runs one of `functions`."""
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    return any(frame.name in functions for frame in frames)


def early_line(error: BaseException) -> str | None:
    """One line for the errors of an experiment's evaluation and Tango's checks of its values
    (nothing of `catwalk_steps` needed), or None."""
    for link in chain(error):
        ours = JSONNET_CATWALK.match(first_line(link))
        if ours:
            return f"ConfigurationError: {ours.group(1)}"
        ext_json = JSONNET_EXT_JSON.search(str(link)) if isinstance(link, RuntimeError) else None
        if ext_json:
            reason, name = ext_json.groups()
            return (
                f"ConfigurationError: --ext-var {name}: not valid JSON ({reason}); give an "
                f"""object, e.g. {name}='{{"train_steps": 100}}'"""
            )
        wrong_type = TANGO_TYPE.fullmatch(str(link)) if isinstance(link, TypeError) else None
        if wrong_type:
            key, expected, value, actual = wrong_type.groups()
            return f"ConfigurationError: {key}: expected {expected}, got {value!r} ({actual})"
        unused = UNUSED_OVERRIDES.match(str(link)) if isinstance(link, ValueError) else None
        if unused:
            return (
                f"ConfigurationError: -o: the experiment has no {unused.group(1)} to override "
                "(a key must name a value the experiment has, or a whole block)"
            )
        unknown_step = UNKNOWN_STEP.match(str(link)) if isinstance(link, AssertionError) else None
        if unknown_step:
            name, steps = unknown_step.groups()
            return (
                f"ConfigurationError: -s {name}: the experiment has no such step "
                f"(it has: {steps.replace(chr(39), '')})"
            )
        if isinstance(link, RuntimeError) and raised_in(link, "parse_overrides"):
            return f"ConfigurationError: -o: not valid JSON ({jsonnet_reason(link)})"
        if isinstance(link, (AttributeError, TypeError)) and raised_in(link, "with_overrides"):
            return (
                "ConfigurationError: -o: an object of keys and values, e.g. "
                """'{"steps.trained.train_steps": 100}' """
                "(a list, a text or a number overrides nothing)"
            )
        if isinstance(link, RuntimeError) and raised_in(link, "evaluate_file"):
            return f"ConfigurationError: the experiment does not evaluate ({jsonnet_reason(link)})"
    return None


def jsonnet_reason(error: BaseException) -> str:
    """jsonnet's message and the first place it names, on one line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    places = [m.group(1) for line in lines[1:] for m in [LOCATION.search(line)] if m]
    where = f" at {places[0]}" if places else ""
    return f"{lines[0] if lines else type(error).__name__}{where}"


def one_line(error: BaseException) -> str | None:
    """The line for `error`: catwalk_steps' own rules once it is imported, else the early ones."""
    errors = sys.modules.get("catwalk_steps.errors")
    if errors is not None:
        return errors.one_line(error)
    return early_line(error)


def closest(name: str, candidates: list[str]) -> str | None:
    """The candidate `name` was probably meant to be, or None when none is close.

    Case-insensitively ('torch::Adamw' is 'torch::AdamW', not 'torch::Adam'), among the names of
    the same namespace when there are any, and on the part after the namespace: every
    `catwalk::` name shares that prefix, which made 'catwalk::nosuchstep' look like
    'catwalk::evaluate'.
    """

    def key(text: str) -> str:
        return text.lower().rpartition("::")[2]

    namespace = name.lower().rpartition("::")[0]
    same = [c for c in candidates if c.lower().rpartition("::")[0] == namespace]
    by_key = {key(c): c for c in same or candidates}
    found = difflib.get_close_matches(key(name), list(by_key), n=1, cutoff=0.75)
    return by_key[found[0]] if found else None


def verbose() -> bool:
    """Tracebacks on the terminal: `--log-level debug`, or CATWALK_TRACEBACKS=1."""
    return logging.getLogger().level <= logging.DEBUG or os.environ.get("CATWALK_TRACEBACKS") == "1"


class OneLineOnTheTerminal(logging.Filter):
    """A terminal handler's filter: a record that carries a one-line error is shown by this
    handler as that line, without its traceback; the records of `catwalk_steps.traceback` (a
    worker's traceback) are not shown. The record itself is left as it is, so the run's log file
    (a handler without this filter) keeps every traceback."""

    def __init__(self, handler: logging.Handler):
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        if verbose():
            return True
        if record.name == TRACEBACK_LOGGER:
            return False
        error = record.exc_info[1] if record.exc_info else None
        line = one_line(error) if isinstance(error, BaseException) else None
        if line is None:
            return True
        shown = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        shown.msg, shown.args = line, None
        self.handler.handle(shown)  # passes this filter: it carries no error
        return False


def one_line_on_the_terminal(root: logging.Logger) -> None:
    """Every root handler but the run's log file (a `logging.FileHandler`, Tango's
    `file_handler`) gets :class:`OneLineOnTheTerminal`; once per handler."""
    for handler in root.handlers:
        terminal = not isinstance(handler, logging.FileHandler)
        if terminal and not any(isinstance(f, OneLineOnTheTerminal) for f in handler.filters):
            handler.addFilter(OneLineOnTheTerminal(handler))


def drop_unwritable_records(module: Any) -> None:
    """A record Tango's handler (`module.RichHandler`) cannot write (an `OSError`: the
    workspace's disk full under the run's log file, a closed pipe) is dropped, where logging
    printed a 20-line "Logging error" traceback per record (and a table, which Tango's handler
    prints outside its `try`, ended the command with a traceback) after the one-line error that
    said why (a `DiskFullError`). Any other error in a handler is reported as logging reports
    it. Once."""

    def dropping_emit(emit: Any) -> Any:
        def emit_or_drop(self: logging.Handler, record: logging.LogRecord) -> None:
            with contextlib.suppress(OSError):
                emit(self, record)

        return emit_or_drop

    def dropping_handle_error(handle_error: Any) -> Any:
        def handle_or_drop(self: logging.Handler, record: logging.LogRecord) -> None:
            if not isinstance(sys.exc_info()[1], OSError):
                handle_error(self, record)

        return handle_or_drop

    patch(module, "RichHandler.emit", DROPS, dropping_emit)
    patch(module, "RichHandler.handleError", DROPS, dropping_handle_error)
