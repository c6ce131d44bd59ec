"""The versions every patch of someone else's library was checked against: the one table, read
by :mod:`.patching` (every patch of Tango, FairScale, torch and Python's fork server, from
interpreter start or from `catwalk_steps`). Imports nothing but the standard library."""

from __future__ import annotations

import platform
from importlib import metadata

# package -> the releases checked (a release also covers its local builds: 2.13.0+cpu).
CHECKED = {
    "ai2-tango": ("1.3.2",),
    "fairscale": ("0.4.13",),
    "torch": ("2.11", "2.12", "2.13"),
    "python": ("3.10", "3.11", "3.12", "3.13"),  # its fork server (catwalk_startup.fork_requests)
}


def installed(package: str) -> str | None:
    """The installed version of `package` ("python": this interpreter's)."""
    if package == "python":
        return platform.python_version()
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
    if package == "python":
        use = f"use Python {versions[-1]}"
    else:
        use = f"install {pin} (as pyproject.toml pins it)"
    return (
        f"catwalk_steps: the patch '{patch_name}' was checked against {package} "
        f"{' or '.join(versions)}, but {version or 'none'} is installed; {use} or check the "
        "patch against the new code"
    )
