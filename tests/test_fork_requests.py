"""The fork server that workers fork from refuses a request it cannot use and goes on serving
(catwalk_startup/fork_requests.py): garbage bytes, a connection closed at once or silent, one
descriptor, a count that differs, or four pipes of another process's (which Python's server
forked for, the new process unpickling what the first pipe held) each ended Python's server;
through `tango run`, workers starting then failed with ConnectionRefusedError."""

from __future__ import annotations

import errno
import json
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from catwalk_startup import checked, fork_requests

from . import commands
from .bad_requests import KINDS, send
from .conftest import EXPERIMENTS, REPO, TANGO_ENV, TINY_DEMO, tango_command
from .test_trust import Payload

REFUSED = "catwalk_steps: the fork server refused a request ("


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def payload(marker: Path) -> bytes:
    return pickle.dumps(Payload(marker))


def refusal(kind: str, marker: Path) -> str:
    """What `receive_request` said of one kind of bad request, in this process."""
    client, server = socket.socketpair()
    with client, server:
        sent = send(kind, client, payload(marker))
        if kind != "silent":
            client.shutdown(socket.SHUT_WR)
        try:
            fork_requests.receive_request(server, fork_requests.forkserver.MAXFDS_TO_SEND + 1)
        except ConnectionAbortedError as e:
            assert e.errno == errno.ECONNABORTED  # the one error the server's loop goes on after
            return e.strerror
        finally:
            for fd in sent:
                os.close(fd)
    raise AssertionError(f"{kind}: not refused")


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("bytes", "0 descriptors, where a request has 4 to 256"),
        ("closed at once", "the connection closed without one"),
        ("silent", "nothing sent within 0.2 s"),
        ("one descriptor", "1 descriptors, where a request has 4 to 256"),
        ("a count that differs", "b'\\x07' for its count of 4 descriptors"),
        ("forged", "its descriptor 2 is a pipe of another process's, not the server's 'alive'"),
    ],
)
def test_a_bad_request_is_refused_in_one_line_and_leaves_no_descriptor(
    tmp_path, monkeypatch, capsys, kind, said
):
    monkeypatch.setattr(fork_requests, "TIMEOUT_S", 0.2)
    before = open_fds()
    message = refusal(kind, tmp_path / "pwned")
    assert message.startswith(REFUSED + said) and message.endswith("; it goes on serving")
    assert capsys.readouterr().err == message + "\n"
    assert open_fds() == before


def test_a_request_of_the_servers_own_family_is_served():
    """What `multiprocessing.forkserver.connect_to_new_process` sends: this process holds the
    read end of the "alive" pipe, as the server does."""
    ends = [os.pipe() for _ in range(4)]
    (start_r, _), (_, report_w), (_, alive_w), (_, tracker_w) = ends
    sent = [start_r, report_w, alive_w, tracker_w]
    client, server = socket.socketpair()
    with client, server:
        socket.send_fds(client, [bytes([4])], sent)
        received = fork_requests.receive_request(server, 257)
    assert [os.fstat(fd).st_ino for fd in received] == [os.fstat(fd).st_ino for fd in sent]
    for fd in [*received, *(fd for pair in ends for fd in pair)]:
        os.close(fd)


def test_another_python_is_refused_in_one_line(monkeypatch):
    from catwalk_startup import patching

    monkeypatch.setattr(checked.platform, "python_version", lambda: "3.14.0")
    with pytest.raises(patching.PackageChanged) as error:
        patching.check_version("python", fork_requests.PATCH)
    assert str(error.value) == (
        "catwalk_steps: the patch 'the fork server refuses malformed requests' was checked "
        "against python 3.10 or 3.11 or 3.12 or 3.13, but 3.14.0 is installed; use Python 3.13 "
        "or check the patch against the new code"
    )


SERVER = """
import json, multiprocessing, multiprocessing.forkserver as fs, os, socket, sys
from pathlib import Path
from tests.bad_requests import send
context = multiprocessing.get_context("forkserver")
context.set_forkserver_preload(["catwalk_startup.fork_requests"])
fs.ensure_running()
server = fs._forkserver._forkserver_pid
for kind in sys.argv[2:]:
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(fs._forkserver._forkserver_address)
        for fd in send(kind, connection, Path(sys.argv[1]).read_bytes()):
            os.close(fd)
worker = context.Process(target=os.getpid)
worker.start()
worker.join()
print(json.dumps([worker.exitcode, server == fs._forkserver._forkserver_pid]))
"""


def test_a_launched_server_refuses_each_and_serves_the_next(tmp_path):
    """Python's own fork server, started with the module in its preload (as the launcher's is),
    in a new interpreter: after five bad requests it starts a process, still the same server."""
    marker = tmp_path / "pwned"
    (tmp_path / "payload").write_bytes(payload(marker))
    done = subprocess.run(
        [sys.executable, "-c", SERVER, str(tmp_path / "payload"), *KINDS],
        cwd=REPO,
        env={**TANGO_ENV, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [0, True], done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == len(KINDS) and all(line.startswith(REFUSED) for line in lines), lines
    assert not marker.exists()


def server_socket(command: commands.Command) -> Path:
    """The socket of the fork server `command` started, once it is there (in the run's own
    directory, named after the command's pid: catwalk_steps/run_temp.py)."""
    pattern = f"catwalk-run-{command.pid}-*/pymp-*/listener-*"
    deadline = time.monotonic() + 120
    while not (found := list(Path(tempfile.gettempdir()).glob(pattern))):
        assert command.poll() is None and time.monotonic() < deadline, command.output()[-3000:]
        time.sleep(0.02)
    return found[0]


@pytest.mark.slow
@pytest.mark.distributed
def test_bad_requests_to_a_runs_fork_server_leave_the_run_succeeding(tmp_path):
    """`tango run` with two workers, its real fork server (a new interpreter); as soon as its
    socket appears (only this user can reach it: a path, 0600, in 0700 directories), five bad
    requests: the server refuses each in one line and goes on to serve the workers, the run
    succeeds, nothing the forged request carried runs (before: `WorkerFailed: a worker died
    while the workers were starting (EOFError: unexpected EOF)`, or ConnectionRefusedError)."""
    overrides = {**TINY_DEMO, "steps.trained.device_count": 2}
    argv = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / "ws", "poked", overrides)
    env = commands.EXEC_FORK_SERVER_ENV  # the real one: a new interpreter, its preload imported
    command = commands.start([*argv, "-s", "trained"], tmp_path / "out.txt", env)
    path = server_socket(command)
    for where in (path.parent, path.parent.parent):  # what keeps others out from the start
        info = where.stat()
        assert (info.st_mode & 0o777, info.st_uid) == (0o700, os.getuid()), where
    # multiprocessing binds the socket, then makes it 0600: seen between the two, it is the
    # umask's for a moment, inside the 0700 directories
    deadline = time.monotonic() + 10
    while path.stat().st_mode & 0o777 != 0o600 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (path.stat().st_mode & 0o777, path.stat().st_uid) == (0o600, os.getuid())
    marker = tmp_path / "pwned"
    for kind in KINDS:
        with socket.socket(socket.AF_UNIX) as connection:
            connection.connect(str(path))
            for fd in send(kind, connection, payload(marker)):
                os.close(fd)
    assert command.wait(600) == 0, command.output()[-6000:]
    output = command.output()
    assert sum(line.startswith(REFUSED) for line in output.splitlines()) == len(KINDS), output
    assert "Traceback" not in output and "ConnectionRefusedError" not in output
    assert not marker.exists()
