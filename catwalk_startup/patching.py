"""How we change someone else's library where it breaks ordinary use: one named patch per fix,
each applied once, each refusing to apply to a version it was not checked against (the one
table: :data:`catwalk_startup.checked.CHECKED`; Tango, FairScale, torch, Python's fork server).

A patch of Tango replaces one attribute (a function, method or classmethod) with a wrapper of
the original (:func:`patch`); FairScale's and torch's patches (:mod:`catwalk_steps.engines.
fairscale_cpu`, the meta-device parameters of :mod:`catwalk_steps.engines.sharded_weights`) call
:func:`check_version` first. If the installed version is not one the patches were checked
against, or the attribute has moved, the patch fails with one line naming it, rather than
wrapping code that no longer does what the wrapper expects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import checked


class PackageChanged(ImportError):
    """The installed package is not one a patch was checked against."""


class TangoChanged(PackageChanged):
    """The installed Tango is not the one a patch was checked against."""


def check_version(package: str, patch_name: str) -> None:
    """One line naming the patch, the package and both versions, unless the installed version
    is one the patch was checked against (:data:`catwalk_startup.checked.CHECKED`)."""
    version = checked.installed(package)
    if not checked.is_checked(package, version):
        error = TangoChanged if package == "ai2-tango" else PackageChanged
        raise error(checked.refusal(package, patch_name, version))


def check_tango(patch_name: str) -> None:
    check_version("ai2-tango", patch_name)


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
