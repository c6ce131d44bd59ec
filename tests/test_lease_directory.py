"""Where a user's GPU leases live (catwalk_steps/distributed/lease.py): a place no other user
can take first (the shared temp directory was one), a link to a directory of one's own is one,
and a bad `CATWALK_LEASE_DIR` is one line at the start of `tango run`, before the data step."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError

from . import commands
from .commands import error_lines
from .conftest import EXPERIMENTS, TANGO_ENV, TINY_DEMO, tango_command

OTHER_UID = 65534  # nobody: a uid other than the run's


def private_dir(path: Path, mode: int = 0o700) -> Path:
    path.mkdir(parents=True)
    path.chmod(mode)
    return path


@pytest.fixture
def lease_env(tmp_path, monkeypatch):
    """No CATWALK_LEASE_DIR; the runtime and cache directories in `tmp_path`."""
    monkeypatch.delenv("CATWALK_LEASE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    return tmp_path


def test_the_default_is_the_users_runtime_directory_else_the_cache(lease_env):
    from catwalk_steps.distributed.lease import lease_directory

    runtime = private_dir(lease_env / "run")
    assert lease_directory() == runtime / "catwalk-devices"
    assert (runtime / "catwalk-devices").stat().st_mode & 0o777 == 0o700
    runtime.chmod(0o755)  # a runtime directory others may enter is not used
    fallback = lease_directory()
    assert fallback.parent == lease_env / "cache" / "catwalk"
    assert fallback.name.startswith("devices-") and fallback.stat().st_mode & 0o777 == 0o700


def test_a_link_to_a_directory_of_ones_own_is_a_lease_directory(tmp_path, monkeypatch):
    from catwalk_steps.distributed.lease import lease_directory

    target = private_dir(tmp_path / "mine")
    (tmp_path / "link").symlink_to(target)
    monkeypatch.setenv("CATWALK_LEASE_DIR", str(tmp_path / "link"))
    assert lease_directory() == target
    (tmp_path / "file").write_text("")
    (tmp_path / "to_file").symlink_to(tmp_path / "file")
    for bad in ("file", "to_file"):
        monkeypatch.setenv("CATWALK_LEASE_DIR", str(tmp_path / bad))
        with pytest.raises(ConfigurationError, match="CATWALK_LEASE_DIR=.*: .* not a directory"):
            lease_directory()
    monkeypatch.setenv("CATWALK_LEASE_DIR", str(tmp_path / "file" / "sub"))
    with pytest.raises(ConfigurationError, match="cannot make the device lease directory"):
        lease_directory()


def run_demo(tmp_path: Path, name: str, env: dict, fresh: bool = False) -> tuple[int, str]:
    overrides = {**TINY_DEMO, "steps.trained.train_steps": 1, "steps.trained.validate_every": 1}
    argv = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", name, overrides)
    command = commands.start(argv, tmp_path / f"{name}.txt", env=env, fresh=fresh)
    return command.wait(300), command.output()


@pytest.mark.slow
def test_a_bad_lease_directory_is_one_line_before_the_data_step(tmp_path):
    (tmp_path / "not_a_dir").write_text("")
    env = {
        **TANGO_ENV,
        "CATWALK_SIMULATED_GPUS": "2",
        "CATWALK_LEASE_DIR": str(tmp_path / "not_a_dir"),
        "COLUMNS": "400",
    }
    code, output = run_demo(tmp_path, "bad", env)
    lines = error_lines(output)
    assert code == 1 and len(lines) == 1, lines or output[-3000:]
    assert (
        f"ConfigurationError: CATWALK_LEASE_DIR={tmp_path / 'not_a_dir'}: the device lease "
        "directory is not a directory"
    ) in lines[0]
    assert 'Starting step "' not in output  # the data step did not run
    assert not list((tmp_path / "ws" / "cache").glob("*/data.*"))


@pytest.mark.slow
def test_another_user_making_the_old_temp_path_first_stops_nothing(tmp_path):
    """`$TMPDIR/catwalk-devices-<uid>`, where leases were kept, made first by another user: a
    run with simulated GPUs leases them in a place of its own and ends rc 0."""
    if os.geteuid() != 0:
        pytest.skip("making a directory as another user needs root")
    temp = private_dir(tmp_path / "tmp", 0o1777)
    taken = private_dir(temp / f"catwalk-devices-{os.getuid()}")
    os.chown(taken, OTHER_UID, OTHER_UID)
    env = {**TANGO_ENV, "CATWALK_SIMULATED_GPUS": "2", "TMPDIR": str(temp)}
    env.pop("CATWALK_LEASE_DIR", None)
    env.update(XDG_RUNTIME_DIR=str(tmp_path / "none"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    code, output = run_demo(tmp_path, "taken", env, fresh=True)  # TMPDIR read afresh
    assert code == 0, output[-3000:]
    assert "holds simulated GPU" in output
    assert list((tmp_path / "cache" / "catwalk").glob("devices-*/simulated-gpu-*.lock"))
