"""Console commands (`tango run`, `catwalk-worker`, `catwalk-export`, ...) as the tests run them.

A command runs in a process of its own, as a user's does: its own arguments, environment,
working directory, output files, exit code and signals. The process is forked from the server
the test process already keeps for its distributed tests (`tests/distributed.py`), which has
imported torch, transformers, Tango and this package once, and it calls the console script's
entry point: a fresh interpreter spent 6-8 s of CPU importing them for every `tango run`, about
a third of the whole suite. It then exits as the interpreter would: with `sys.exit`'s code; with
1 after `sys.excepthook` for an error; killed by SIGINT after a KeyboardInterrupt; `atexit`
functions run first.

`CATWALK_TEST_COMMANDS=exec` runs every command as a fresh interpreter instead; the demo fixture
(`main_job_run`) and the console-script tests always do, so the installed scripts stay tested.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .conftest import REPO, TANGO_ENV

EXEC = os.environ.get("CATWALK_TEST_COMMANDS") == "exec"


def entry_point(script: str) -> str | None:
    """'module:function' of an installed console script, or None for any other program."""
    found = metadata.entry_points(group="console_scripts", name=Path(script).name)
    venv_script = Path(script).parent == Path(sys.executable).parent
    return next((ep.value for ep in found), None) if venv_script else None


def exit_as_python_does(main) -> None:
    try:
        code = main()
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130  # not reached
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    _finish()
    os._exit(code or 0)


def _finish() -> None:
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()


def become_a_main_process() -> None:
    """multiprocessing's view of this process as a fresh interpreter's: no parent, named
    MainProcess, no start method chosen (Tango sets one, and logs from its main process only).
    The names are multiprocessing's own (3.11); they have not changed since 3.8."""
    from multiprocessing import process

    me = process.current_process()
    me._identity, me._name, me._parent_pid, me._parent_name = (), "MainProcess", None, None
    process._parent_process = None
    process._children.clear()
    multiprocessing.set_start_method(None, force=True)


def _forked_command(
    target: str, argv: list[str], env: dict, cwd: str, out: str, err: str | None
) -> None:
    """The forked process: the command's files, environment and signals, then its entry point."""
    out_fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    err_fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if err else out_fd
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = list(argv)
    become_a_main_process()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a foreground job starts
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if "OMP_NUM_THREADS" in env:
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    module, _, function = target.partition(":")
    exit_as_python_does(getattr(importlib.import_module(module), function))


class Command:
    """A started command, with the part of `subprocess.Popen`'s interface the tests use."""

    def __init__(
        self, argv: list[str], out: Path, err: Path | None, env: dict, cwd: Path, fresh: bool
    ):
        self.out, self.err = out, err
        out.write_text("")  # both files exist, empty, from the start; the command appends
        if err is not None:
            err.write_text("")
        target = None if EXEC or fresh else entry_point(argv[0])
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
        from .distributed import forkserver_context

        self._popen = None
        self._process = forkserver_context().Process(
            target=_forked_command,
            args=(target, argv, dict(env), str(cwd), str(out), str(err) if err else None),
        )
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        if self._popen is not None:
            return self._popen.poll()
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
) -> Command:
    """Starts `argv` writing to `out` (and `err`, else `out` too); `fresh`: as a new interpreter."""
    return Command(argv, out, err, TANGO_ENV if env is None else env, cwd, fresh)


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
) -> Finished:
    """Runs `argv` to the end, as `subprocess.run(capture_output=True, text=True)` does; killed
    after `timeout` seconds (`subprocess.TimeoutExpired`)."""
    with tempfile.TemporaryDirectory() as directory:
        out, err = Path(directory) / "out", Path(directory) / "err"
        command = start(argv, out, env, cwd, err, fresh)
        try:
            command.wait(timeout)
        except subprocess.TimeoutExpired:
            command.kill()
            command.wait()
            raise
        return Finished(command.returncode, command.output(), command.errors())
