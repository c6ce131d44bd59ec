"""How we change someone else's library where it breaks ordinary use: one named patch per fix,
each applied once, each refusing to apply to a version it was not checked against (the one
table: :data:`.checked.CHECKED`; Tango, FairScale, torch, Python's fork server).

A patch replaces one attribute (a function, method, classmethod or module attribute) with a
wrapper of the original (:func:`patch`): this package's from the interpreter's start, before
Tango reads an experiment, and `catwalk_steps`' when it is imported. A patch that lasts only
while a block of code runs (the meta-device parameters of
:mod:`catwalk_steps.engines.sharded_weights`) calls :func:`check_version` first. If the
installed version is not one the patches were checked against, or the attribute has moved, the
patch fails with one line naming it, rather than wrapping code that no longer does what the
wrapper expects. Imports nothing but the standard library.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from . import checked

MARK = "_catwalk_patch"  # the patch's name, on each replacement: applied once


class PackageChanged(ImportError):
    """The installed package is not one a patch was checked against."""


class TangoChanged(PackageChanged):
    """The installed Tango is not the one a patch was checked against."""


def check_version(package: str, patch_name: str) -> None:
    """One line naming the patch, the package and both versions, unless the installed version
    is one the patch was checked against (:data:`.checked.CHECKED`)."""
    version = checked.installed(package)
    if not checked.is_checked(package, version):
        error = TangoChanged if package == "ai2-tango" else PackageChanged
        raise error(checked.refusal(package, patch_name, version))


def check_tango(patch_name: str) -> None:
    check_version("ai2-tango", patch_name)


def patch(
    owner: Any,
    attribute: str,
    patch_name: str,
    wrap: Callable[[Any], Any],
    package: str = "ai2-tango",
) -> None:
    """`owner.attribute = wrap(original)`, once; `attribute` may be dotted (a class of a module:
    `"RichHandler.emit"`), looked up after the version is checked. An attribute the class
    inherits is replaced on it alone; a classmethod stays one. The replacement keeps the
    patch's name and what it replaced (`__wrapped__`)."""
    check_version(package, patch_name)
    *path, name = attribute.split(".")
    holder = owner
    for part in path:
        holder = getattr(holder, part, None)
    original = None if holder is None else inspect.getattr_static(holder, name, None)
    if original is None:
        where = getattr(owner, "__name__", repr(owner))
        raise (TangoChanged if package == "ai2-tango" else PackageChanged)(
            f"catwalk_steps: the patch '{patch_name}' replaces {where}.{attribute}, which the "
            f"installed {package} no longer has; check the patch against the new code"
        )
    function = original.__func__ if isinstance(original, classmethod) else original
    if patched(function) == patch_name:
        return
    replacement = wrap(function)
    setattr(replacement, MARK, patch_name)
    replacement.__wrapped__ = function
    if isinstance(original, classmethod):
        replacement = classmethod(replacement)
    setattr(holder, name, replacement)


def patched(attribute: Any) -> str | None:
    """The name of the patch that made `attribute` (as it is now), if one did."""
    function = attribute.__func__ if isinstance(attribute, classmethod) else attribute
    return getattr(function, MARK, None)
