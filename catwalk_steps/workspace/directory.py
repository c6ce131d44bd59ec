"""The workspace's directory: one we can write, names that stay inside it, what a killed job
left half-written, and a `settings.json` written whole (:class:`.shared.SharedLocalWorkspace`
stands on these)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tango.common.exceptions import ConfigurationError

from ..errors import first_line
from ..files import write_json_atomic


def check_writable(directory: Path, what: str = "workspace") -> None:
    """Fails with one line naming `directory` unless a file can be created in it.

    A real write, not `os.access`: permissions are not the only reason (read-only mounts,
    immutable directories, a file where the directory should be, a full disk).
    """
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".catwalk-write-test-"):
            pass
    except OSError as e:
        reason = e.strerror or first_line(e)
        raise ConfigurationError(
            f"{what} {directory}: cannot write there ({reason}); choose another directory "
            "(-w, or workspace.dir in tango.yml) or make it writable"
        ) from None


def plain_name(name: str) -> bool:
    """A name that is one entry of a directory, not a path."""
    return name not in ("", ".", "..") and not any(c in name for c in ("/", "\\", "\0"))


def check_path_name(name: str, what: str) -> None:
    """Tango makes a run's name a directory and each step's name a link inside it: a name that
    is a path would be written elsewhere (`-n ../../x`)."""
    if not plain_name(name):
        raise ConfigurationError(
            f"{what} {name!r}: Tango would write it outside the workspace's runs directory; "
            "use a name without '/', '\\' or '..'"
        )


def remove_partial_result(step_dir: Path) -> None:
    """A result a killed job was writing (no cache metadata yet); the work dir stays, for the
    checkpoints a resumed run starts from."""
    for entry in step_dir.iterdir():
        if entry.name in ("work", "lock"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def write_settings_once(directory: Path) -> None:
    """A new workspace's `settings.json`, written whole: Tango writes it in place when it finds
    none, and a second job starting at that moment read an empty file. A workspace of Tango
    before 1.0 keeps its records as pickles (`cache/*/stepinfo.dill`), which Tango upgrades by
    unpickling them: refused instead."""
    settings = directory / "settings.json"
    if settings.exists():
        return
    if any((directory / "cache").glob("*/stepinfo.dill")):
        raise ConfigurationError(
            f"workspace {directory}: its step records are pickles (cache/*/stepinfo.dill, a "
            "workspace of Tango before 1.0), which are not read; upgrade it once with stock "
            "Tango where you trust its files, or use another workspace"
        )
    write_json_atomic(settings, {"version": 2})
