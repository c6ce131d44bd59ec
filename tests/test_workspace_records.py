"""The workspace's step records (`stepinfo.sqlite`) are data: written as JSON, and a database
written by stock Tango (pickles) read without running anything. A planted record (a pickle that
would create a marker file) is refused in one line through `tango run`; the marker never
appears, and moving the database away lets the next run use the cached results."""

from __future__ import annotations

import os
import pickle
import sqlite3
from pathlib import Path

import pytest
from sqlitedict import SqliteDict
from tango.step_info import StepInfo
from tango.workspaces import LocalWorkspace

from catwalk_steps.workspace.records import DamagedRecordsError, StepRecords
from catwalk_steps.workspace.shared import SharedLocalWorkspace

from . import commands
from .conftest import EXPERIMENTS, TINY_DEMO, step_result, tango_command

DEMO = EXPERIMENTS / "demo.jsonnet"
TINY_RUN = TINY_DEMO


class Payload:
    """Unpickling this runs `touch marker`."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def raw_values(database: Path) -> list:
    with sqlite3.connect(database) as connection:
        return [row[0] for row in connection.execute("SELECT value FROM unnamed")]


def plant(database: Path, marker: Path) -> None:
    """Every record's value replaced by a pickle that would create `marker`."""
    payload = sqlite3.Binary(pickle.dumps(Payload(marker)))
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE unnamed SET value = ?", (payload,))


def record(unique_id: str = "step-1") -> StepInfo:
    from tango.common.util import utc_now_datetime

    return StepInfo(
        unique_id=unique_id,
        step_class_name="Evaluate",
        dependencies={"data-0"},
        cacheable=True,
        start_time=utc_now_datetime(),
        end_time=utc_now_datetime(),
        config={"type": "catwalk::evaluate", "batch_size": 4},
    )


def test_records_are_written_as_json_and_read_back_whole(tmp_path):
    database = tmp_path / "stepinfo.sqlite"
    info = record()
    with StepRecords(database) as records:
        records[info.unique_id] = info
        records.commit()
    [value] = raw_values(database)
    assert isinstance(value, str) and value.startswith("{")  # text, not a pickle
    with StepRecords(database, flag="r") as records:
        assert records[info.unique_id] == info  # times to the microsecond too


def test_a_records_packages_read_back_as_tangos_own_reading_gives_them(tmp_path):
    """The installed packages (~150 pairs) are read here, not by Tango's from_params (16 of a
    record's 17 ms): the same record as Tango's `from_json_dict`; a list of another shape is
    the database's one line."""
    import json

    from catwalk_steps.workspace.records import decode_record, encode_record

    info = record()
    assert len(info.environment.packages) > 50
    data = json.loads(encode_record(info))
    read = decode_record(tmp_path / "db", json.dumps(data))
    times = {key: data.pop(key) for key in ("start_time", "end_time")}
    tangos = StepInfo.from_json_dict(data)
    assert read.environment == tangos.environment and read.config == tangos.config
    assert all(type(pair) is tuple for pair in read.environment.packages)
    assert read.start_time.isoformat() == times["start_time"]
    data["environment"]["packages"] = [["torch"]]
    with pytest.raises(DamagedRecordsError, match=r"environment.packages: expected a list"):
        decode_record(tmp_path / "db", json.dumps({**data, **times}))


def test_a_stock_tango_database_is_read_without_unpickling_anything_else(tmp_path):
    database = tmp_path / "stepinfo.sqlite"
    info = record()
    with SqliteDict(database) as stock:  # Tango's own encoding: pickles
        stock[info.unique_id] = info
        stock.commit()
    assert isinstance(raw_values(database)[0], bytes)
    with StepRecords(database) as records:
        assert records[info.unique_id] == info
    marker = tmp_path / "marker"
    plant(database, marker)
    with StepRecords(database) as records, pytest.raises(DamagedRecordsError) as error:
        records[info.unique_id]
    assert str(error.value).startswith(
        f"{database}: a record is a pickle that names posix.system, which is not part of a "
        "step's record; nothing of it was run"
    )
    assert not marker.exists()


def test_every_record_tango_s_workspace_writes_is_json(tmp_path):
    """Tango's own LocalWorkspace methods (registering a run) write through the same class."""
    from tango import Step

    class Noop(Step):
        def run(self) -> int:  # type: ignore[override]
            return 1

    workspace = SharedLocalWorkspace(tmp_path / "ws")
    workspace.register_run([Noop(step_name="noop")], "run")
    values = raw_values(workspace.step_info_file)
    assert values and all(isinstance(v, str) for v in values)
    assert LocalWorkspace(tmp_path / "ws").registered_run("run").steps["noop"].step_name == "noop"


def test_a_tango_0_workspace_s_pickled_records_are_refused(tmp_path):
    (tmp_path / "old" / "cache" / "Step-1").mkdir(parents=True)
    (tmp_path / "old" / "cache" / "Step-1" / "stepinfo.dill").write_bytes(b"not read")
    from tango.common.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="its step records are pickles"):
        SharedLocalWorkspace(tmp_path / "old")


@pytest.mark.slow
def test_through_tango_run_a_planted_record_runs_nothing(tmp_path):
    workspace = tmp_path / "ws"
    done = commands.run(tango_command(DEMO, workspace, "first", TINY_RUN), timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    trained = step_result(workspace, "first", "trained")
    marker = tmp_path / "planted record ran"
    plant(workspace / "stepinfo.sqlite", marker)
    done = commands.run(tango_command(DEMO, workspace, "again", TINY_RUN), timeout=300)
    output = done.stdout + done.stderr
    assert not marker.exists()
    assert done.returncode == 1 and "Traceback" not in output, output[-3000:]
    lines = [line for line in output.splitlines() if " ERROR " in line]
    assert len(lines) == 1 and "DamagedRecordsError: " in lines[0], lines or output[-3000:]
    assert (
        f"{workspace / 'stepinfo.sqlite'}: a record is a pickle that names posix.system"
        in (lines[0])
    )
    # As the line says: the database moved away, the cached results serve the next run.
    (workspace / "stepinfo.sqlite").rename(tmp_path / "moved.sqlite")
    done = commands.run(tango_command(DEMO, workspace, "after", TINY_RUN), timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert 'Starting step "' not in output
    assert step_result(workspace, "after", "trained") == trained
    assert not marker.exists()
