"""The SFT -> DPO -> RLVR recipe in one file, through `tango run` (shrunk by `--ext-var limit=2`,
as tests/test_limit.py runs every other offline experiment): every stage runs once and is cached,
so a second run trains nothing."""

from __future__ import annotations

import re

import pytest

from .conftest import EXPERIMENTS, run_tango
from .test_limit import LIMITED, RUN_LIMIT

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

RECIPE = EXPERIMENTS / "tulu_recipe.jsonnet"
TRAININGS = {"sft_trained", "dpo_trained", "rlvr_trained"}


def started(output: str) -> set[str]:
    return set(re.findall(r'Starting step "([^"]+)"', output))


def test_each_stage_trains_once_and_a_second_run_trains_nothing(tmp_path):
    workspace, limit = tmp_path / "ws", ("--ext-var", f"limit={RUN_LIMIT}")
    first = run_tango(RECIPE, workspace, "first", extra=limit)
    assert started(first) >= TRAININGS
    reports = first.count("report.md / report.csv")
    assert reports == 4 and first.count(LIMITED) == reports  # sft, dpo, rlvr and the recipe's
    again = run_tango(RECIPE, workspace, "again", extra=limit)
    assert started(again) == set(), started(again)  # every stage cached
    assert all(f'Found output for step "{name}" in cache' in again for name in TRAININGS)
