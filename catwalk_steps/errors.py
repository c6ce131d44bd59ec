"""What users read when something is wrong: one line that names the field, file or module.

Error types whose message already says all that (configuration errors, bad task data, a
non-finite loss, a damaged checkpoint, a failed worker, ...) are registered here with
:func:`one_line_error`; `tango run` then shows them as one line instead of a traceback
(:mod:`catwalk_startup.one_line`), and the traceback goes to the run's log.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from tango.common.exceptions import ConfigurationError

from catwalk_startup.one_line import chain, early_line, first_line

_ONE_LINE: list[type[BaseException]] = [ConfigurationError]
# Links of Tango's "Failed to construct argument ..." chains that say nothing about the cause.
UNION_TRY = "While constructing an argument of type"  # what Tango puts before an error's args
_NOISE = ("NoneType takes no arguments", UNION_TRY)


_REWRITES: list = []


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool: what a setting's number must be."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def whole(value: object, key: str, minimum: int = 1, optional: bool = False) -> None:
    """`key` must be a whole number >= `minimum` (or absent, when optional): one line if not."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{key}: must be a whole number >= {minimum}, got {value!r}")


def rewrite_messages(rewrite: Callable[[str], str | None]) -> None:
    """`rewrite(message) -> better message or None`, tried on each configuration error's first
    line (the Tango face adds what only it knows, such as the keys a step takes)."""
    _REWRITES.append(rewrite)


def one_line_error(cls: type[BaseException]) -> type[BaseException]:
    """Class decorator: this error's message is complete; show it as one line."""
    _ONE_LINE.append(cls)
    return cls


def rebuilt(type_name: str, message: str) -> BaseException | None:
    """An error of a registered one-line type, rebuilt from its qualified type name and message
    (as a worker process reports it to its launcher: as data, never pickled)."""
    for cls in _ONE_LINE:
        if f"{cls.__module__}.{cls.__qualname__}" == type_name:
            return cls(message)
    return None


def command_line(prog: str, action: Callable[[], Any], quiet: bool = False) -> int:
    """Runs a console command's `action`, printing what it returns (unless `quiet`). Any failure
    is one line on stderr and exit status 1, as in `tango run` (the traceback with
    CATWALK_TRACEBACKS=1)."""
    import os
    import sys
    import traceback

    try:
        result = action()
        if not quiet:
            print(result)
    except Exception as e:
        if os.environ.get("CATWALK_TRACEBACKS") == "1":
            traceback.print_exc()
        line = one_line(e) or f"{type(e).__name__}: {first_line(e)}"
        print(f"{prog}: {line}", file=sys.stderr)
        return 1
    return 0


def one_line(error: BaseException) -> str | None:
    """`Type: message` for the innermost registered error in the chain, or None when the chain
    holds none (then the traceback is the best explanation there is)."""
    early = early_line(error)
    if early is not None:
        return early
    known = [e for e in chain(error) if isinstance(e, tuple(_ONE_LINE))]
    meaningful = [e for e in known if not any(n in own_message(e) for n in _NOISE)]
    if not meaningful:
        return None
    cause = meaningful[-1]
    message = own_message(cause).splitlines()[0] if own_message(cause) else first_line(cause)
    for rewrite in _REWRITES:
        better = rewrite(message)
        if better is not None:
            return f"{type(cause).__name__}: {better}"
    return f"{type(cause).__name__}: {message}"


def own_message(error: BaseException) -> str:
    """An error's message without what Tango put before its args while it tried each type of a
    union (`task: Task | None`): a task's `TaskDataError` keeps its own words (a
    `ConfigurationError` keeps its message apart from its args)."""
    args = list(error.args)
    while len(args) > 1 and isinstance(args[0], str) and args[0].startswith(UNION_TRY):
        args.pop(0)
    return str(args[0]) if len(args) == 1 and len(error.args) > 1 else str(error)


def refusal_reason(error: BaseException) -> str:
    """What torch's weights-only reader refused, whole: its line naming the global ("Trying to
    load unsupported GLOBAL posix.system whose module posix is blocked.", or "Unsupported
    operand 0" for bytes that are no pickle), else its first sentence (its first line is a
    paragraph about `weights_only`)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = ("GLOBAL", "Unsupported global", "Unsupported operand")
    named = [line for line in lines if any(words in line for words in said)]
    if named:
        return named[0]
    first = first_line(error)
    return first.split(". ")[0].rstrip(".") if ". " in first else first


def accepted_keys(constructor: Any) -> set[str] | None:
    """The keyword parameters a constructor takes; None when it takes any (`**kwargs` that go
    nowhere we can see)."""
    keys: set[str] = set()
    is_class = inspect.isclass(constructor)  # a bool: mypy refuses `__init__` on a narrowed type
    targets = [constructor.__init__] if is_class else [constructor]
    if is_class:
        # A subclass passing **kwargs on takes its bases' keys too (ShardedDataLoader -> torch's).
        targets += [base.__init__ for base in constructor.__mro__[1:] if "__init__" in vars(base)]
    for target in targets:
        try:
            parameters = inspect.signature(target).parameters.values()
        except (TypeError, ValueError):
            return None
        keys |= {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            return keys - {"self"}
    return None
