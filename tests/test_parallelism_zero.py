"""`tango run --parallelism 0`: every step in the main process, as Tango documents 0 (it ran
two slot processes)."""

from __future__ import annotations

import pytest

from .conftest import EXPERIMENTS, TINY_DEMO, run_tango

pytestmark = pytest.mark.slow


def test_parallelism_zero_runs_every_step_in_the_main_process(tmp_path):
    output = run_tango(
        EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "zero", TINY_DEMO, extra=("-j", "0")
    )
    assert "✓ 5 succeeded" in output
    assert 'Starting step "trained"' in output
    assert "[step " not in output and "[slot]" not in output  # a slot's log prefix
