"""How we change Tango 1.3.2 where it breaks ordinary use: one named patch per fix, each applied
once, each refusing to apply to a Tango it was not checked against.

A patch replaces one attribute (a function, method or classmethod) with a wrapper of the
original. If the installed ai2-tango is not the version the patches were checked against, or
the attribute has moved, importing `catwalk_steps` fails with one line naming the patch, rather
than wrapping code that no longer does what the wrapper expects.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

CHECKED_TANGO = "1.3.2"


class TangoChanged(ImportError):
    """The installed Tango is not the one a patch was checked against."""


def check_tango(patch_name: str) -> None:
    installed = metadata.version("ai2-tango")
    if installed != CHECKED_TANGO:
        raise TangoChanged(
            f"catwalk_steps: the patch '{patch_name}' was checked against ai2-tango "
            f"{CHECKED_TANGO}, but {installed} is installed; install ai2-tango=={CHECKED_TANGO} "
            "(as pyproject.toml pins it) or check the patch against the new code"
        )


def patch(owner: Any, attribute: str, patch_name: str, wrap: Callable[[Any], Any]) -> None:
    """`owner.attribute = wrap(original)`, once; a classmethod stays one."""
    check_tango(patch_name)
    original = vars(owner).get(attribute)
    if original is None:
        where = getattr(owner, "__name__", repr(owner))
        raise TangoChanged(
            f"catwalk_steps: the patch '{patch_name}' replaces {where}.{attribute}, which the "
            f"installed ai2-tango no longer has; check the patch against the new code"
        )
    function = original.__func__ if isinstance(original, classmethod) else original
    if getattr(function, "_catwalk_patch", None) == patch_name:
        return
    replacement = wrap(function)
    replacement._catwalk_patch = patch_name
    if isinstance(original, classmethod):
        replacement = classmethod(replacement)
    setattr(owner, attribute, replacement)
