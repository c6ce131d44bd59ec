"""Turning library errors into the one-line messages users read."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """A one-line reason from a library error whose message may span many lines."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__
