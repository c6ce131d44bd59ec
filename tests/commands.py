"""Console commands (`tango run`, `catwalk-worker`, `catwalk-export`, ...) as the tests run them.

A command runs in a process of its own, as a user's does: its own arguments, environment,
working directory, output files, exit code and signals. The process is forked from a command
server (tests/command_server.py), an ordinary interpreter this process starts once with
`subprocess`, which has imported torch, transformers, Tango and this package: a fresh
interpreter spent 6-8 s of CPU importing them for every `tango run`, about a third of the whole
suite. The fork server a command's training workers fork from is served the same way (6-8 s of
CPU each again). The command calls the console script's entry point and ends as the interpreter
would: `sys.exit`'s code, an uncaught error printed, killed by SIGINT after a KeyboardInterrupt.

`CATWALK_TEST_COMMANDS=exec` runs every command as a fresh interpreter instead; the console-script
tests always do (one of them a training run: test_lease_directory), so the installed scripts stay
tested. A console script this checkout declares (pyproject.toml) that the environment has not
installed yet (`pip install -e .` not rerun since it was added) runs from its declared entry
point all the same: served, or as `python -c` calling it where a fresh interpreter is asked for.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .conftest import REPO, TANGO_ENV

EXEC = os.environ.get("CATWALK_TEST_COMMANDS") == "exec"
# A served command's training workers fork from a fork server that the command server forks
# too (tests/command_server.py); with this environment the command starts Python's own, a new
# interpreter below it (for tests of the process tree a command makes).
EXEC_FORK_SERVER_ENV = {**TANGO_ENV, "CATWALK_TEST_FORKSERVER": "exec"}


def declared_scripts() -> dict[str, str]:
    """This checkout's console scripts, name -> 'module:function' (pyproject.toml's
    [project.scripts])."""
    text = (REPO / "pyproject.toml").read_text()
    section = re.search(r"^\[project\.scripts\]\n(.*?)(?=^\[)", text, re.M | re.S)
    lines = re.findall(r'^([\w-]+) = "([\w.]+:\w+)"', section.group(1) if section else "", re.M)
    return dict(lines)


def entry_point(script: str) -> str | None:
    """'module:function' of a console script in the environment's bin directory: one this
    checkout declares (also before `pip install -e .` has installed it: a script added since
    the environment was made is served from its declaration), else one installed; None for any
    other program."""
    if Path(script).parent != Path(sys.executable).parent:
        return None
    name = Path(script).name
    found = metadata.entry_points(group="console_scripts", name=name)
    return declared_scripts().get(name) or next((ep.value for ep in found), None)


def program(argv: list[str]) -> list[str]:
    """`argv` as a new process runs it: a declared console script not installed yet as its
    entry point called by this interpreter, as the installed script would call it."""
    target = entry_point(argv[0])
    if target is None or Path(argv[0]).exists():
        return argv
    module, _, function = target.partition(":")
    call = f"import sys; from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-c", call, *argv[1:]]


class CommandServer:
    """This process's command server, started on first use; it stops with this process."""

    _running: CommandServer | None = None

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="catwalk-commands-")  # mode 0700: ours alone
        self.path = os.path.join(self.directory, "socket")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.command_server", self.path],
            cwd=REPO,
            env=TANGO_ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the command server exited with {self.process.wait()}")
        atexit.register(self.stop)

    @classmethod
    def running(cls) -> CommandServer:
        if cls._running is None:
            cls._running = CommandServer()
        return cls._running

    def connect(self, request: dict) -> socket.socket:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.path)
        connection.sendall(json.dumps(request).encode() + b"\n")
        return connection

    def stop(self) -> None:
        self.process.stdin.close()  # the server exits when its stdin closes
        self.process.wait(30)
        shutil.rmtree(self.directory, ignore_errors=True)


class ServedProcess:
    """A command forked by the server: its pid, and its exit code once the server reports it."""

    def __init__(
        self,
        target: str,
        argv: list[str],
        env: dict,
        cwd: str,
        out: str,
        err: str | None,
        netns: str | None = None,
        cpus: str | None = None,
    ):
        request = dict(target=target, argv=argv, env=env, cwd=cwd, out=out, err=err, netns=netns)
        request["cpus"] = cpus
        self._connection = CommandServer.running().connect(request)
        self._received = b""
        self.pid = self._message(None)["pid"]
        self.exitcode: int | None = None

    def _message(self, timeout: float | None) -> dict | None:
        """The server's next JSON line, or None if none arrives within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._received:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._connection.settimeout(left)
            try:
                chunk = self._connection.recv(4096)
            except (TimeoutError, BlockingIOError):
                return None
            if not chunk:  # the last message has no newline: the connection closes after it
                self._received += b"\n"
                break
            self._received += chunk
        line, _, self._received = self._received.partition(b"\n")
        return json.loads(line)

    def join(self, timeout: float | None = None) -> None:
        if self.exitcode is None:
            message = self._message(timeout)
            if message is not None:
                self.exitcode = message["returncode"]
                self._connection.close()


def pinned(argv: list[str]) -> tuple[str | None, list[str]]:
    """`taskset -c CPUS command...` as (CPUS, command): a served command is pinned to those
    cores as `taskset` pins a program (its fork server too), without a fresh interpreter."""
    if argv[:2] == ["taskset", "-c"] and len(argv) > 3:
        return argv[2], argv[3:]
    return None, argv


def run_served(target: str, argv: list[str], out: Path, err: Path | None = None) -> int:
    """`target` ('module:function') as a served command's entry point; its exit code."""
    process = ServedProcess(target, argv, dict(TANGO_ENV), str(REPO), str(out), err and str(err))
    process.join(120)
    return process.exitcode


class Command:
    """A started command, with the part of `subprocess.Popen`'s interface the tests use."""

    def __init__(
        self,
        argv: list[str],
        out: Path,
        err: Path | None,
        env: dict,
        cwd: Path,
        fresh: bool,
        netns: str | None = None,
    ):
        self.out, self.err = out, err
        out.write_text("")  # both files exist, empty, from the start; the command appends
        if err is not None:
            err.write_text("")
        cpus, argv = pinned(list(argv))
        target = None if EXEC or fresh else entry_point(argv[0])
        if target is None:
            argv = program(argv if cpus is None else ["taskset", "-c", cpus, *argv])
        if target is None and netns is not None:  # a fresh interpreter on that host
            argv = ["ip", "netns", "exec", netns, *argv]
        if target is None:
            with open(out, "a") as stdout, open(err or os.devnull, "a") as errors:
                self._popen = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdout=stdout,
                    stderr=subprocess.STDOUT if err is None else errors,
                    stdin=subprocess.DEVNULL,
                )
            self._process = None
            self.pid = self._popen.pid
            return
        self._popen = None
        self._process = ServedProcess(
            target,
            list(argv),
            dict(env),
            str(cwd),
            str(out),
            str(err) if err else None,
            netns,
            cpus,
        )
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        if self._popen is not None:
            return self._popen.poll()
        self._process.join(0)
        return self._process.exitcode

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._popen is not None:
            return self._popen.wait(timeout)
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(str(self.out), timeout)
        return self._process.exitcode

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        """(output, errors or None when merged into the output) once it has exited."""
        self.wait(timeout)
        return self.output(), (self.errors() if self.err is not None else None)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def output(self) -> str:
        return self.out.read_text()

    def errors(self) -> str:
        return self.err.read_text() if self.err is not None else ""


def start(
    argv: list[str],
    out: Path,
    env: dict | None = None,
    cwd: Path = REPO,
    err: Path | None = None,
    fresh: bool = False,
    netns: str | None = None,
) -> Command:
    """Starts `argv` writing to `out` (and `err`, else `out` too); `fresh`: as a new interpreter;
    `netns`: in that network namespace (a host of tests/hosts.py)."""
    return Command(argv, out, err, TANGO_ENV if env is None else env, cwd, fresh, netns)


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str


def run(
    argv: list[str],
    timeout: float = 600,
    env: dict | None = None,
    cwd: Path = REPO,
    fresh: bool = False,
    netns: str | None = None,
) -> Finished:
    """Runs `argv` to the end, as `subprocess.run(capture_output=True, text=True)` does; killed
    after `timeout` seconds (`subprocess.TimeoutExpired`)."""
    with tempfile.TemporaryDirectory() as directory:
        out, err = Path(directory) / "out", Path(directory) / "err"
        command = start(argv, out, env, cwd, err, fresh, netns)
        try:
            command.wait(timeout)
        except subprocess.TimeoutExpired:
            command.kill()
            command.wait()
            raise
        return Finished(command.returncode, command.output(), command.errors())


def error_lines(text: str) -> list[str]:
    """What a command's terminal shows as errors, besides Tango's own "✗ ... failed" summary:
    each should be one line."""
    return [
        line
        for line in text.splitlines()
        if (" ERROR " in line and "\N{BALLOT X}" not in line) or "Traceback" in line
    ]


def one_line_failures(argvs: dict[str, list[str]], directory: Path) -> dict[str, tuple[str, str]]:
    """Starts every command at once (on a wide terminal: no line wraps), waits for each, and
    asserts that each fails with exit status 1 and one error line: `{name: (that line, the
    whole output)}`."""
    env = {**TANGO_ENV, "COLUMNS": "400"}
    started = {
        name: start(argv, directory / f"{name}.txt", env=env) for name, argv in argvs.items()
    }
    failures = {}
    for name, command in started.items():
        code = command.wait(300)
        text = command.output()
        lines = error_lines(text)
        assert code == 1 and len(lines) == 1, (name, code, lines or text[-3000:])
        failures[name] = (lines[0], text)
    return failures
