"""The tests' served commands (tests/commands.py, forked by tests/command_server.py) end as a
fresh interpreter running the same console script ends: exit code, output, and the signal after
a KeyboardInterrupt; and they are main processes as a fresh interpreter's is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from . import commands, exit_cases
from .conftest import REPO, TANGO_ENV

pytestmark = pytest.mark.slow  # fresh interpreters


@pytest.mark.parametrize("main", exit_cases.ALL)
def test_a_served_command_exits_as_a_fresh_interpreter_would(main, tmp_path):
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; from tests import exit_cases as t; sys.exit(t.{main.__name__}())",
        ],
        cwd=REPO,
        env=TANGO_ENV,
        capture_output=True,
    )
    out, err = tmp_path / "out", tmp_path / "err"
    served = commands.run_served(f"tests.exit_cases:{main.__name__}", ["x"], out, err)
    assert served == fresh.returncode, fresh.stderr
    assert out.read_bytes() == fresh.stdout
    # a traceback's frames differ (the served one starts in the server): its last line
    assert err.read_bytes().splitlines()[-1:] == fresh.stderr.splitlines()[-1:]


@pytest.mark.parametrize("arguments", [["/tmp"], ["--help"]])
def test_a_console_script_forked_prints_and_exits_as_the_installed_one(arguments):
    argv = [str(Path(sys.executable).with_name("catwalk-clear-step")), *arguments]
    fresh, forked = commands.run(argv, fresh=True), commands.run(argv)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
