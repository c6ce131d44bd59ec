"""What another user of the machine can reach of a run: every socket a `tango run` listens on
reads data only, and what it cannot read as data it drops; nothing arriving there runs code.

A running two-process training is sent a pickled payload (one that would create a marker file
when unpickled) on every TCP socket its processes listen on, framed as Tango's log records are
and raw; its Unix sockets must be out of other users' reach. The run finishes as if nothing had
happened, and the marker never appears.
"""

from __future__ import annotations

import os
import pickle
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import commands
from .conftest import EXPERIMENTS, tango_command


class Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def process_tree(root: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat_line.rsplit(")", 1)[1].split()[1])
    members, grown = {root}, True
    while grown:
        grown = False
        for pid, parent in parents.items():
            if parent in members and pid not in members:
                members.add(pid)
                grown = True
    return members


def socket_inodes(pids: set[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        try:
            descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(descriptor)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def listening(root: int) -> tuple[list[tuple[str, int]], list[str]]:
    """(host, port) of every TCP socket the process tree listens on, and its Unix sockets."""
    owned = socket_inodes(process_tree(root))
    tcp = []
    for table, host in (("tcp", "127.0.0.1"), ("tcp6", "::1")):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in owned:  # LISTEN
                tcp.append((host, int(fields[1].rsplit(":", 1)[1], 16)))
    unix = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "00010000" and int(fields[6]) in owned:  # accepting connections
            unix.append(fields[7] if len(fields) > 7 else "@")
    return tcp, unix


def reachable_by_others(path: str) -> bool:
    """Whether a user other than the owner may connect: an abstract socket, or a socket file
    whose every parent directory others may enter and which others may write."""
    if path.startswith("@"):
        return True
    target = Path(path)
    try:
        if any(not os.stat(d).st_mode & stat.S_IXOTH for d in target.parents):
            return False
        return bool(os.stat(target).st_mode & stat.S_IWOTH)
    except FileNotFoundError:  # unlinked: no path leads to it
        return False


def send(host: str, port: int, data: bytes) -> None:
    try:
        with socket.create_connection((host, port), timeout=2) as connection:
            connection.sendall(data)
            time.sleep(0.2)
    except OSError:
        pass  # refused or reset: nothing ran either way


@pytest.mark.slow
@pytest.mark.distributed
def test_a_pickle_sent_to_every_socket_of_a_run_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    pickled = pickle.dumps(Payload(marker))
    framed = struct.pack(">L", len(pickled)) + pickled  # as a Tango log record travels
    hold = tmp_path / "hold"  # the workers hold before their first step until hold/go exists
    hold.mkdir()
    says = {"type": "test::says", "text": "workers hold", "hold_dir": str(hold)}
    overrides = {
        "steps.data.task.sizes": {"train": 64, "validation": 16},
        "steps.trained.train_steps": 4,
        "steps.trained.validate_every": 2,
        "steps.trained.callbacks": [says],
    }
    argv = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "listen", overrides)
    out = tmp_path / "out.txt"
    run = commands.start(argv, out, fresh=True)  # the installed script, from interpreter start
    tried: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 240
    while run.poll() is None and time.monotonic() < deadline:
        if (hold / "ready").exists():  # every worker has joined the group: all are listening
            tcp, unix = listening(run.pid)
            assert not [p for p in unix if reachable_by_others(p)], unix
            for host, port in tcp:
                if (host, port) not in tried:
                    send(host, port, framed)
                    send(host, port, pickled)
                    tried.add((host, port))
            (hold / "go").touch()  # sent to each socket; on with training, sent to any new one
        time.sleep(0.5)
    assert run.wait(300) == 0, out.read_text()[-3000:]
    assert len(tried) >= 3, tried  # Tango's log receiver and each worker's gloo listener
    assert not marker.exists()
    assert "Traceback" not in out.read_text()


def test_tangos_log_receiver_reads_json_from_interpreter_start():
    """In a fresh interpreter of this environment Tango's logging module arrives patched: the
    .pth that `make setup` writes installs the hook before anything imports Tango."""
    probe = (
        "import sys, tango.common.logging as l; from catwalk_startup.patching import patched; "
        "assert 'catwalk_steps' not in sys.modules; print(patched(l.LogRecordStreamHandler.handle))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == "log records as JSON", done.stderr


def test_a_record_that_is_not_json_is_dropped_and_a_json_one_is_logged(caplog):
    import logging

    from catwalk_startup import log_records as records

    assert records.plain_record(pickle.dumps({"msg": "x"})) is None
    assert records.plain_record(b'{"msg": {"nested": 1}}') is None
    assert records.plain_record(b"[1, 2]") is None
    record = logging.LogRecord("catwalk.test", logging.WARNING, "f.py", 1, "%s apples", (3,), None)
    data = records.record_bytes(record)
    assert struct.unpack(">L", data[:4])[0] == len(data) - 4
    fields = records.plain_record(data[4:])
    assert fields["msg"] == "3 apples" and fields["args"] is None
    # An object attached to a record (Tango's highlighter) does not cross: its text would be
    # called by the receiving terminal handler.
    record.highlighter = object()
    fields = records.plain_record(records.record_bytes(record)[4:])
    assert "highlighter" not in fields and fields["msg"] == "3 apples"
