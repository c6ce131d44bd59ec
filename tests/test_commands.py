"""The tests' forked commands (tests/commands.py) end as a fresh interpreter running the same
console script ends: exit code, output, and the signal after a KeyboardInterrupt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from . import commands, exit_cases
from .conftest import REPO, TANGO_ENV
from .distributed import forkserver_context

pytestmark = pytest.mark.slow  # fresh interpreters


@pytest.mark.parametrize("main", exit_cases.ALL)
def test_a_forked_command_exits_as_a_fresh_interpreter_would(main):
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
    forked = forkserver_context().Process(target=commands.exit_as_python_does, args=(main,))
    forked.start()
    forked.join(60)
    assert forked.exitcode == fresh.returncode, fresh.stderr


@pytest.mark.parametrize("arguments", [["/tmp"], ["--help"]])
def test_a_console_script_forked_prints_and_exits_as_the_installed_one(arguments):
    argv = [str(Path(sys.executable).with_name("catwalk-clear-step")), *arguments]
    fresh, forked = commands.run(argv, fresh=True), commands.run(argv)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
