"""Steps that a running step makes (`catwalk::checkpoints`' evaluations, known only once a
training step has run) spread over the slots of `tango run --parallelism N`
(:mod:`.scheduler`), as the run's own steps are.

A step that makes steps runs them in as many slots of its own as the run has (the slot it runs
in was told: :func:`.slot.run_parallelism`), each model's evaluations in the slot that holds
it; without `--parallelism`, or with 1, it runs them itself.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tango.common.exceptions import ConfigurationError
from tango.common.util import get_extra_imported_modules
from tango.step_graph import StepGraph

from .scheduler import ParallelRun


class NestedExecutor:
    """What :class:`.scheduler.ParallelRun` asks of an executor."""

    def __init__(self, workspace: Any, parallelism: int):
        self.workspace = workspace
        self.parallelism = parallelism
        self.include_package = list(get_extra_imported_modules())


def run_in_slots(config: Mapping[str, Any], workspace: Any, parallelism: int, key: str) -> None:
    """The steps of `config` (a step graph's config, in the order to start them) computed into
    the workspace by `parallelism` slots; one line naming the steps that failed."""
    graph = StepGraph.from_params(copy.deepcopy(dict(config)))
    ordered = StepGraph({name: graph[name] for name in config})
    output = ParallelRun(NestedExecutor(workspace, parallelism), ordered, None).execute()
    failed = sorted({*output.failed, *output.not_run})
    if failed:
        raise ConfigurationError(f"{key}: {', '.join(failed)} failed (their logs say why)")
