"""Fixes for Tango 1.3.2 behaviour that breaks ordinary use; each is one small, named patch.

Checked against ai2-tango 1.3.2. Importing `catwalk_steps` applies them.
"""

from __future__ import annotations

import functools
from importlib import metadata

from tango.step_info import EnvironmentMetadata, GitMetadata


def git_metadata_or_none() -> GitMetadata | None:
    """Tango's git metadata, or None where Tango's own look-up raises."""
    try:
        return GitMetadata.check_for_repo()
    except ValueError:  # no commit yet, or no remote named 'origin'
        return None


def installed_packages() -> list[tuple[str, str]]:
    """(name, version) of every installed distribution, read with importlib.metadata."""
    found = {
        (d.metadata["Name"], d.version) for d in metadata.distributions() if d.metadata["Name"]
    }
    return sorted(found)


def record_environment_without_failures() -> None:
    """Two default factories of `EnvironmentMetadata` fail in ordinary set-ups:

    - `git`: inside a git repository with no commit yet or no remote, `tango run` stops with
      `ValueError: Reference at 'refs/heads/main' does not exist`. We record no git metadata
      there, as Tango does outside a repository.
    - `packages`: Tango reads them with `pkg_resources`, which current setuptools no longer
      ships, and logs an error with a traceback for every step. We read them with
      importlib.metadata.

    The factories were bound when the dataclass was defined, so we pass both fields explicitly.
    """
    original_init = EnvironmentMetadata.__init__
    if getattr(original_init, "_catwalk_tolerant", False):
        return

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        if not args:
            kwargs.setdefault("git", git_metadata_or_none())
            kwargs.setdefault("packages", installed_packages())
        original_init(self, *args, **kwargs)

    __init__._catwalk_tolerant = True
    EnvironmentMetadata.__init__ = __init__


record_environment_without_failures()
