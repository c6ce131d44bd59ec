"""Who writes into a run's log: Tango's log receiver on 127.0.0.1 prints the records of the
run's own workers (they carry the key the receiver made: catwalk_startup/log_records.py), with
their control characters escaped; a record from another user, or from anyone without the key,
is dropped unprinted, on the terminal and in `runs/<run>/out.log`."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import commands
from .conftest import EXPERIMENTS, TINY_DEMO, tango_command

OTHER_UID = 65534  # nobody: a uid other than the run's, account or not

# Connects and sends one framed record as `uid` (taken before the socket is made); returns once
# the receiver has closed the connection, so the record has been printed or dropped by then.
SENDER = """
import encodings.idna, json, os, socket, struct, sys  # all imports before the uid changes
uid = int(sys.argv[3])
if uid != os.getuid():
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
record = {"name": "intruder", "levelno": 40, "levelname": "ERROR", "msg": sys.argv[2],
          "catwalk_log_key": "0" * 32}
data = json.dumps(record).encode()
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30) as connection:
    connection.sendall(struct.pack(">L", len(data)) + data)
    connection.shutdown(socket.SHUT_WR)
    while connection.recv(1024):  # the receiver closes once it has handled the record
        pass
"""


def send_as(uid: int, port: int, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SENDER, str(port), message, str(uid)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr


def wait_for(path: Path, run: commands.Command, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert run.poll() is None, run.output()[-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)
    return path.read_text()


@pytest.mark.slow
@pytest.mark.distributed
def test_only_the_runs_workers_write_into_its_log_and_escapes_print_escaped(tmp_path):
    """A real two-worker `tango run`: rank 0 logs a line with an ANSI escape and holds while
    another uid, and this uid without the key, send records to the receiver; then the run
    ends. The worker's line is shown, escaped; the others' are nowhere."""
    if os.geteuid() != 0:
        pytest.skip("sending as another uid needs root")
    hold = tmp_path / "hold"
    hold.mkdir()
    says = {"type": "test::says", "text": "worker says \x1b[31mred\x1b[0m", "hold_dir": str(hold)}
    overrides = {
        **TINY_DEMO,
        "steps.trained.device_count": 2,
        "steps.trained.callbacks": [says],
    }
    argv = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "log", overrides)
    run = commands.start(argv, tmp_path / "out.txt")
    try:
        port = int(wait_for(hold / "ready", run))
        send_as(OTHER_UID, port, "FROM-ANOTHER-UID \x1b[2J")
        send_as(os.getuid(), port, "WITHOUT-THE-KEY")
    finally:
        (hold / "go").touch()
    assert run.wait(300) == 0, run.output()[-3000:]
    terminal = run.output()
    log_file = "".join(p.read_text() for p in (tmp_path / "ws" / "runs").glob("*/out.log"))
    for text in (terminal, log_file):
        assert "worker says \\x1b[31mred\\x1b[0m" in text, text[-3000:]  # a worker's line arrives
        assert "\x1b" not in text
        assert "FROM-ANOTHER-UID" not in text and "WITHOUT-THE-KEY" not in text


def test_a_record_with_the_receivers_key_is_read_and_one_without_is_not(monkeypatch):
    from catwalk_startup import log_records as records

    class Receiver:
        catwalk_log_key = "k" * 32

    monkeypatch.setenv(records.KEY_ENV, Receiver.catwalk_log_key)
    record = logging.LogRecord(
        "w", logging.WARNING, "f.py", 1, "x \x1b[31m\x9b\r\x00\t\n", (), None
    )
    fields = records.plain_record(records.record_bytes(record)[4:])
    assert records.from_our_sender(Receiver(), dict(fields))
    assert records.escaped(fields["msg"]) == "x \\x1b[31m\\x9b\\r\\x00\t\n"
    assert not records.from_our_sender(Receiver(), {**fields, records.KEY_FIELD: "k" * 31})
    assert not records.from_our_sender(Receiver(), {**fields, records.KEY_FIELD: 1})
    without = {k: v for k, v in fields.items() if k != records.KEY_FIELD}
    assert not records.from_our_sender(Receiver(), without)
    assert not records.from_our_sender(object(), dict(fields))  # a receiver without a key
