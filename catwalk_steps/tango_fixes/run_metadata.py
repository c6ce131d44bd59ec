"""What Tango records about the environment of every step, without failing where it used to.

Two default factories of Tango 1.3.2's `EnvironmentMetadata` fail in ordinary set-ups:

- `git`: inside a git repository with no commit yet or no remote, `tango run` stops with
  `ValueError: Reference at 'refs/heads/main' does not exist`. We record no git metadata there,
  as Tango does outside a repository.
- `packages`: Tango reads them with `pkg_resources`, which current setuptools no longer ships,
  and logs an error with a traceback for every step. We read them with importlib.metadata.

The factories were bound when the dataclass was defined, so both fields are passed explicitly,
each looked up once per process (they were looked up again for every step).
"""

from __future__ import annotations

import functools
import os
from importlib import metadata

from tango.step_info import EnvironmentMetadata, GitMetadata

from catwalk_startup.patching import patch


def git_metadata_or_none() -> GitMetadata | None:
    """Tango's git metadata of the working directory, or None where Tango's own look-up
    raises; looked up once per process and directory (GitPython's look-up, ~0.3 s of CPU, ran
    for every step's record): every step of a run records the commit the run started at, the
    code it imported."""
    return git_metadata_in(os.getcwd())


@functools.cache
def git_metadata_in(directory: str) -> GitMetadata | None:
    try:
        return GitMetadata.check_for_repo()  # of the working directory, which is `directory`
    except ValueError:  # no commit yet, or no remote named 'origin'
        return None


@functools.cache
def installed_packages() -> list[tuple[str, str]]:
    """(name, version) of every installed distribution, read with importlib.metadata once per
    process (reading ~200 metadata files took ~0.4 s for every step of a run)."""
    found = {
        (d.metadata["Name"], d.version) for d in metadata.distributions() if d.metadata["Name"]
    }
    return sorted(found)


def record_environment_without_failures() -> None:
    def wrap(original):
        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            if not args:
                kwargs.setdefault("git", git_metadata_or_none())
                kwargs.setdefault("packages", installed_packages())
            original(self, *args, **kwargs)

        return __init__

    patch(EnvironmentMetadata, "__init__", "record_environment_without_failures", wrap)


record_environment_without_failures()
