"""The named fixes to Tango 1.3.2: run metadata that records without failing, and the patch
mechanism itself (applied once, refused on a Tango it was not checked against)."""

from __future__ import annotations

import subprocess
import types
from importlib import metadata

import pytest
from tango.step_info import EnvironmentMetadata

from catwalk_steps.tango_fixes import patching
from catwalk_steps.tango_fixes.run_metadata import (
    git_metadata_or_none,
    record_environment_without_failures,
)


def test_a_repository_without_commits_records_no_git_metadata(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    assert git_metadata_or_none() is None
    assert EnvironmentMetadata().git is None  # Tango's own factory raised ValueError here


def test_packages_are_recorded_where_pkg_resources_cannot_be_imported(monkeypatch):
    """Tango's own factory imports pkg_resources (gone from current setuptools); the record
    holds every installed distribution's version without it."""
    import sys

    monkeypatch.setitem(sys.modules, "pkg_resources", None)  # `import pkg_resources` fails
    recorded = dict(EnvironmentMetadata().packages)
    assert recorded["torch"] == metadata.version("torch")
    assert recorded["transformers"] == metadata.version("transformers")
    assert len(recorded) == len({d.metadata["Name"] for d in metadata.distributions()})


def test_a_patch_is_applied_once():
    patched = EnvironmentMetadata.__init__
    record_environment_without_failures()
    assert EnvironmentMetadata.__init__ is patched


def test_a_patch_refuses_another_tango_version_in_one_line(monkeypatch):
    monkeypatch.setattr(patching.metadata, "version", lambda name: "1.4.0")
    owner = types.SimpleNamespace(f=lambda: 1)
    with pytest.raises(patching.TangoChanged) as error:
        patching.patch(owner, "f", "a_fix", lambda original: original)
    assert str(error.value) == (
        "catwalk_steps: the patch 'a_fix' was checked against ai2-tango 1.3.2, but 1.4.0 is "
        "installed; install ai2-tango==1.3.2 (as pyproject.toml pins it) or check the patch "
        "against the new code"
    )


def test_a_patch_of_something_tango_no_longer_has_says_so():
    owner = types.ModuleType("tango_somewhere")
    with pytest.raises(patching.TangoChanged, match="replaces tango_somewhere.gone, which"):
        patching.patch(owner, "gone", "a_fix", lambda original: original)


def test_a_patched_classmethod_stays_a_classmethod():
    class Owner:
        @classmethod
        def name(cls):
            return cls.__name__

    patching.patch(Owner, "name", "shout", lambda f: lambda cls: f(cls).upper())
    assert Owner.name() == "OWNER"
    assert isinstance(vars(Owner)["name"], classmethod)


def test_errors_are_one_line_on_the_terminal_and_whole_in_the_log_file(tmp_path, monkeypatch):
    """Tango's handlers as `_initialize_logging` leaves them (the terminal's filtered by
    catwalk_startup), then the run's log file added, as `tango run` adds it: the terminal shows
    the one line, the log file keeps the traceback, and a worker's traceback reaches only the
    file."""
    import io
    import logging

    import tango.common.logging as tango_logging
    from tango.common.exceptions import ConfigurationError

    from catwalk_startup.one_line import TRACEBACK_LOGGER, one_line_on_the_terminal

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.INFO)
    monkeypatch.delenv("CATWALK_TRACEBACKS", raising=False)
    terminal = io.StringIO()
    root.addHandler(logging.StreamHandler(terminal))
    one_line_on_the_terminal(root)  # what the patched `_initialize_logging` does
    log_file = tmp_path / "out.log"
    root.addHandler(logging.FileHandler(log_file))
    logging.getLogger(TRACEBACK_LOGGER).error("rank 1 failed:\nTraceback ...")
    try:
        raise ConfigurationError("train.grad_accum: must be a whole number >= 1, got 0")
    except ConfigurationError as e:
        tango_logging.log_exc_info(type(e), e, e.__traceback__)
    for handler in root.handlers:
        handler.flush()
    assert terminal.getvalue() == (
        "ConfigurationError: train.grad_accum: must be a whole number >= 1, got 0\n"
    )
    kept = log_file.read_text()
    assert "Traceback (most recent call last)" in kept and "rank 1 failed:" in kept


def test_tangos_logging_is_patched_where_it_makes_its_handlers():
    """The fixes of catwalk_startup hold on to what Tango 1.3.2 has: a receiver whose handler
    reads records, and one function that sets up every handler."""
    import tango.common.logging as tango_logging

    from catwalk_startup.log_records import handle_connection

    assert tango_logging.LogRecordStreamHandler.handle is handle_connection
    assert getattr(tango_logging._initialize_logging, "_catwalk_after", False)
