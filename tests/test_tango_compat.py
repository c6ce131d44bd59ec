"""The two fixes to Tango 1.3.2's run metadata, each on its own."""

from __future__ import annotations

import subprocess
from importlib import metadata

from tango.step_info import EnvironmentMetadata

from catwalk_steps.tango_compat import git_metadata_or_none, installed_packages


def test_a_repository_without_commits_records_no_git_metadata(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    assert git_metadata_or_none() is None
    assert EnvironmentMetadata().git is None  # Tango's own factory raised ValueError here


def test_packages_are_read_without_pkg_resources():
    packages = dict(installed_packages())
    assert packages["torch"] == metadata.version("torch")
    assert packages["ai2-tango"] == "1.3.2"
    assert dict(EnvironmentMetadata().packages)["torch"] == packages["torch"]


def test_the_patch_is_applied_once():
    import catwalk_steps.tango_compat as compat

    patched = EnvironmentMetadata.__init__
    compat.record_environment_without_failures()
    assert EnvironmentMetadata.__init__ is patched
