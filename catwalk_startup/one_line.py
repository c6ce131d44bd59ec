"""Errors on `tango run`'s terminal in one line, from its first moment.

Tango logs every failure with its traceback (`log_exc_info` in tango/common/logging.py, used by
its `sys.excepthook` and its executor): a wall of 30-110 lines with the cause at the end. Here
an error that one line says all of is shown as `Type: message`, and its traceback goes to the
logger `catwalk_steps.traceback`, which the terminal's handlers skip and the run's log file
(`<workspace>/runs/<run>/out.log`) keeps. `--log-level debug` or CATWALK_TRACEBACKS=1 shows
tracebacks on the terminal as before.

Which errors: what can be told before `catwalk_steps` is imported, because Tango evaluates the
experiment before it imports the package (:func:`early_line`: our jsonnet library's `catwalk:`
errors, jsonnet that does not parse in the experiment or in `-o`, an `-o` key the experiment
does not have, Tango's type check of a value), and, once the package is imported, every error
type it registers (:func:`catwalk_steps.errors.one_line`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import traceback
import types
from typing import Any

TRACEBACK_LOGGER = "catwalk_steps.traceback"
# What a `catwalk: ...` error in our jsonnet library looks like once jsonnet has raised it.
JSONNET_CATWALK = re.compile(r"runtime error: catwalk: (.*)", re.IGNORECASE)
# Tango's own type check of a config value: "Expected device_count to be int, found 2 (...)".
TANGO_TYPE = re.compile(r"Expected (\w+) to be (\w+), found (.*) \(<class '(\w+)'>\)\.?")
UNUSED_OVERRIDES = re.compile(r"overrides dict contains unused keys: \[(.*)\]")
LOCATION = re.compile(r"(\S*:\d+:\d+(?:-\d+:\d+|-\d+)?)")


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
        if isinstance(link, RuntimeError) and raised_in(link, "parse_overrides"):
            return f"ConfigurationError: -o: not valid JSON ({jsonnet_reason(link)})"
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


class _HideTracebacks(logging.Filter):
    """A filter for the terminal's handlers: the traceback records are for the log file."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != TRACEBACK_LOGGER


def verbose() -> bool:
    """Tracebacks on the terminal: `--log-level debug`, or CATWALK_TRACEBACKS=1."""
    return logging.getLogger().level <= logging.DEBUG or os.environ.get("CATWALK_TRACEBACKS") == "1"


def hide_tracebacks_on_the_terminal(root: logging.Logger) -> None:
    """Every root handler but the run's log file (a `logging.FileHandler`, Tango's
    `file_handler`) skips the traceback records; once per handler. Done when Tango has set up
    its handlers and again when an error is logged (a handler added since is filtered too)."""
    if verbose():
        return
    for handler in root.handlers:
        terminal = not isinstance(handler, logging.FileHandler)
        if terminal and not any(isinstance(f, _HideTracebacks) for f in handler.filters):
            handler.addFilter(_HideTracebacks())


def patch_log_exc_info(module: types.ModuleType) -> None:
    """Tango's `log_exc_info` shows a one-line error as one line (see the module). Once."""
    original = module.log_exc_info
    if getattr(original, "_catwalk_one_line", False):
        return

    def log_exc_info(exctype: Any, value: Any, tb: Any, logger: Any = None) -> Any:
        root = logging.getLogger()
        line = one_line(value) if isinstance(value, BaseException) else None
        if verbose() or line is None or value in module._EXCEPTIONS_LOGGED:
            return original(exctype, value, tb, logger=logger)
        module._EXCEPTIONS_LOGGED.append(value)
        hide_tracebacks_on_the_terminal(root)
        logging.getLogger(TRACEBACK_LOGGER).error(
            "Traceback of the error below", exc_info=(exctype, value, tb)
        )
        (logger or root).error(line)

    log_exc_info._catwalk_one_line = True  # type: ignore[attr-defined]
    module.log_exc_info = log_exc_info
