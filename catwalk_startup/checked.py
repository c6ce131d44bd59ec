"""The versions every patch of someone else's library was checked against: the one table, read
by :mod:`catwalk_startup` (Tango's logging, from interpreter start) and by
:mod:`catwalk_steps.patching` (every other patch of Tango, FairScale and torch). Imports nothing
but the standard library."""

from __future__ import annotations

from importlib import metadata

# package -> the releases checked (a release also covers its local builds: 2.13.0+cpu).
CHECKED = {
    "ai2-tango": ("1.3.2",),
    "fairscale": ("0.4.13",),
    "torch": ("2.11", "2.12", "2.13"),
}


def installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def is_checked(package: str, version: str | None) -> bool:
    """Whether `version` of `package` is one the patches were checked against."""
    if version is None:
        return False
    public = version.split("+")[0]
    return any(public == v or public.startswith(v + ".") for v in CHECKED[package])


def refusal(package: str, patch_name: str, version: str | None) -> str:
    """The one line a patch says when it meets a version it was not checked against."""
    versions = CHECKED[package]
    pin = f"{package}=={versions[0]}" if len(versions) == 1 else f"{package} {versions[-1]}"
    return (
        f"catwalk_steps: the patch '{patch_name}' was checked against {package} "
        f"{' or '.join(versions)}, but {version or 'none'} is installed; install {pin} (as "
        "pyproject.toml pins it) or check the patch against the new code"
    )
