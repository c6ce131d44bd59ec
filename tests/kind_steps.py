"""A step for the round-trip tests of stored instances (tests/test_kind_ownership.py): it
reads a `catwalk::load_task` result and writes what it read as data. Never cached, so a second
`tango run` runs it again on the stored instances it reads from the workspace."""

from __future__ import annotations

from typing import Any

from tango import Step
from tango.common import DatasetDict

from catwalk_steps.tasks.base import instance_record
from catwalk_steps.workspace.formats import PlainJsonFormat


@Step.register("catwalk_tests::instances_read")
class InstancesRead(Step[dict]):
    """The instances it is given (their class and record) and the first's pairs: what every
    stage downstream of a cached `load_task` sees."""

    CACHEABLE = False
    FORMAT = PlainJsonFormat()

    def run(self, data: DatasetDict, out: str) -> dict[str, Any]:  # type: ignore[override]
        import json
        from pathlib import Path

        read = {
            name: [[type(i).__name__, instance_record(i), i.pairs()] for i in instances]
            for name, instances in data.splits.items()
        }
        Path(out).write_text(json.dumps(read, sort_keys=True))
        return read
