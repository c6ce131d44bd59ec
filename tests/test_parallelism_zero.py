"""`tango run --parallelism 0`: every step in the main process, as Tango documents 0 (it ran
two slot processes); below -1 (`-1`: a slot per core) is refused in one line."""

from __future__ import annotations

import pytest

from . import commands
from .commands import error_lines
from .conftest import EXPERIMENTS, TANGO_ENV, TINY_DEMO, run_tango, tango_command

pytestmark = pytest.mark.slow


def test_parallelism_zero_runs_every_step_in_the_main_process(tmp_path):
    output = run_tango(
        EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "zero", TINY_DEMO, extra=("-j", "0")
    )
    assert "✓ 5 succeeded" in output
    assert 'Starting step "trained"' in output
    assert "[step " not in output and "[slot]" not in output  # a slot's log prefix


def test_a_parallelism_below_minus_one_is_one_line_before_any_step(tmp_path):
    """`--parallelism -5` ran a slot per core, as -1 does, without a word."""
    argv = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "minus", TINY_DEMO)
    done = commands.run([*argv, "--parallelism", "-5"], 300, env={**TANGO_ENV, "COLUMNS": "400"})
    output = done.stdout + done.stderr
    lines = error_lines(output)
    assert done.returncode == 1 and len(lines) == 1, lines or output[-3000:]
    assert (
        "ConfigurationError: --parallelism: -5 is not a number of steps side by side; give N >= 2 "
        "for N slots, 0 or 1 for every step in this process, or -1 for a slot per core"
    ) in lines[0]
    assert 'Starting step "' not in output
    assert not list((tmp_path / "ws" / "runs").glob("*"))  # no run registered
