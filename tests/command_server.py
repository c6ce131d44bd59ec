"""The server that tests/commands.py forks console commands from: `python -m tests.command_server
SOCKET`, started by the test process with `subprocess`, so it is an ordinary main interpreter
(no multiprocessing parent, no start method chosen) and so is every command forked from it.

It imports torch, transformers, Tango and this package once, prints `ready`, then serves one
request per connection on a Unix socket in a directory only its user can enter: a JSON line
naming the console script's entry point, its arguments, environment, working directory,
output files and network namespace, if any (data only, never a pickle). For each request a
handler process forks the command and answers with two JSON lines on the connection: the
command's pid, then its exit code, as `subprocess` reports it (negative: killed by that
signal). The command leaves the server's loop and ends as `python -c "sys.exit(main())"` would
(:func:`end`): it prints an uncaught error, waits for its threads, runs `atexit`, flushes its
streams and re-raises SIGINT after a KeyboardInterrupt, but skips the rest of interpreter
shutdown, which tore down every module the server had imported (0.3 s of CPU per command).

A command's fork server (the one its training workers fork from) is served too: started from
an interpreter that has imported nothing, it spent 6-8 s of CPU importing its preload for every
`tango run` that starts workers. In a served command, :func:`serve_fork_servers` makes
multiprocessing ask this server for it instead: the command forks a stand-in (the pid
multiprocessing watches) that sends a JSON line (the server's preload, the command's
environment, working directory and network namespace) with the server's descriptors (its
socket, the "alive" pipe, the command's stdin, stdout and stderr) and exits as the served fork
server does. It starts as Python's does (`multiprocessing.forkserver.main`), after the module
that ends it with the command (`catwalk_startup.exit_with_parent`) has run again. A command
with `CATWALK_TEST_FORKSERVER=exec` in its environment starts the real one (the tests of what
a fork server leaves behind, or of the process tree).

The server stops when its standard input closes (the test process is gone).
"""

from __future__ import annotations

import ast
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
from typing import Any

COMMAND_MODULES = (
    "catwalk_steps.launch.launcher",
    "tango.__main__",
    "catwalk_steps.commands.export",
    "catwalk_steps.commands.worker",
    "catwalk_steps.commands.clear_step",
    "catwalk_steps.commands.plan",
    "tests.exit_cases",
)
# What the tests' commands and their workers import lazily, each on its own otherwise: the label
# table (olmo_eval, and datasets with it: 1.3-1.6 s of CPU for every `tango run` that names a
# task), peft (adapters), ZeRO's optimizer, the tests' two model families.
TEST_MODULES = (
    "olmo_eval",
    "peft",
    "torch.distributed.optim",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.llama.modeling_llama",
)
INCLUDED = ("catwalk_steps", "tests.training")  # conftest.tango_command's `-i`
FORKSERVER_ENV = "CATWALK_TEST_FORKSERVER"  # "exec": the command starts the real fork server
FORKSERVER_MAIN = "from multiprocessing.forkserver import main"
SERVER_PATH = ""  # this server's socket, for the commands it forks


def preload() -> None:
    from catwalk_steps.launch.launcher import PRELOAD

    for module in (*PRELOAD, *COMMAND_MODULES, *TEST_MODULES):
        importlib.import_module(module)
    warm()


def warm() -> None:
    """What every `tango run` computes once per process, computed here once for all the
    commands forked from this server (each paid ~0.7 s of CPU for it): the tests' included
    packages walked (`tango_fixes/imports.py`), the installed packages and this checkout's git
    metadata that every step's record holds (`tango_fixes/run_metadata.py`; the server runs in
    the repository, where the tests' commands run)."""
    from tango.common.util import import_module_and_submodules

    from catwalk_steps.tango_fixes.run_metadata import git_metadata_or_none, installed_packages

    for package in INCLUDED:
        import_module_and_submodules(package)
    installed_packages()
    git_metadata_or_none()


def serve(path: str) -> dict[str, Any]:
    """Accepts requests until stdin closes (then exits); returns only in a forked command, with
    its request."""
    global SERVER_PATH
    SERVER_PATH = path
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not sys.stdin.buffer.read1(1):
            os._exit(0)
        if listener not in readable:
            continue
        connection, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            return handle(connection)
        connection.close()


def handle(connection: socket.socket) -> dict[str, Any]:
    """In the handler: reads the request, forks the command, reports its pid and exit code."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 8)
    while data and not data.endswith(b"\n"):
        data += connection.recv(1 << 16)
    request = json.loads(data)
    pid = os.fork()
    if pid == 0:
        connection.close()
        return {**request, "fds": fds}
    for fd in fds:
        os.close(fd)
    connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    _, status = os.waitpid(pid, 0)
    connection.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
    connection.close()
    os._exit(0)


def become(request: dict[str, Any]) -> Any:
    """The command's files, environment and signals; returns its entry point."""
    out_fd = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    err = request.get("err")
    err_fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if err else out_fd
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (out_fd, 1), (err_fd, 2)):
        os.dup2(fd, target)
    if request.get("netns"):
        enter_network_namespace(request["netns"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if request.get("cpus"):  # `taskset -c CPUS` (tests/commands.py: pinned)
        os.sched_setaffinity(0, cpu_list(request["cpus"]))
    sys.argv = list(request["argv"])
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a foreground job starts
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if "OMP_NUM_THREADS" in request["env"]:
        import torch

        torch.set_num_threads(int(request["env"]["OMP_NUM_THREADS"]))
    if request["env"].get(FORKSERVER_ENV) != "exec":
        serve_fork_servers(request.get("netns"))
    module, _, function = request["target"].partition(":")
    return getattr(importlib.import_module(module), function)


def cpu_list(text: str) -> set[int]:
    """`taskset -c`'s list: `0`, `0,2`, `0-3`."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def serve_fork_servers(netns: str | None) -> None:
    """In a command: multiprocessing's fork server, when the command starts one, is forked by
    this server (see the module's docstring); any other program starts as before."""
    import multiprocessing.util

    spawn = multiprocessing.util.spawnv_passfds

    def spawnv_passfds(path: str, args: list[str], passfds: list[int]) -> int:
        if not args[-1].startswith(FORKSERVER_MAIN):
            return spawn(path, args, passfds)
        call = ast.parse(args[-1]).body[1].value
        listener, alive, preload = (ast.literal_eval(a) for a in call.args)
        request = {
            "forkserver": {"preload": preload, **ast.literal_eval(call.keywords[0].value)},
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "netns": netns,
            "cpus": sorted(os.sched_getaffinity(0)),  # the command's, as a child's would be
        }
        line = json.dumps(request).encode() + b"\n"
        pid = os.fork()
        if pid == 0:
            stand_in(line, [0, 1, 2, listener, alive])
        return pid

    multiprocessing.util.spawnv_passfds = spawnv_passfds


def stand_in(line: bytes, fds: list[int]) -> None:
    """The pid multiprocessing knows as its fork server's: sends the request, holds no other
    descriptor (not the "alive" pipe's other end), exits with the served server's code."""
    code = 1
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(SERVER_PATH)
            socket.send_fds(connection, [line], fds)
            os.closerange(3, connection.fileno())
            os.closerange(connection.fileno() + 1, os.sysconf("SC_OPEN_MAX"))
            received = b""
            while chunk := connection.recv(4096):
                received += chunk
            code = json.loads(received.splitlines()[-1])["returncode"]
    finally:
        os._exit(code if code >= 0 else 128 - code)


def tango_logging_from_environment() -> None:
    """Tango's logging module reads its settings from the environment as it is imported: the
    log server's port, the level, the prefix, which `tango run` sets for its workers. Read
    again, as a new interpreter's import reads them."""
    import tango.common.logging as tango_logging

    names, env = tango_logging.EnvVarNames, os.environ
    as_bool, as_int = tango_logging._parse_bool, tango_logging._parse_optional_int
    tango_logging.FILE_FRIENDLY_LOGGING = as_bool(env.get(names.FILE_FRIENDLY_LOGGING.value, False))
    tango_logging.TANGO_LOG_LEVEL = env.get(names.LOG_LEVEL.value, None)
    tango_logging.TANGO_CONSOLE_WIDTH = as_int(env.get(names.CONSOLE_WIDTH.value, None))
    tango_logging.TANGO_CLI_LOGGER_ENABLED = as_bool(env.get(names.CLI_LOGGER_ENABLED.value, False))
    tango_logging._LOGGING_PREFIX = env.get(names.LOGGING_PREFIX.value, "")
    tango_logging._LOGGING_HOST = env.get(names.LOGGING_HOST.value, "localhost")
    tango_logging._LOGGING_PORT = as_int(env.get(names.LOGGING_PORT.value, None))


def fork_server(request: dict[str, Any]) -> None:
    """A command's fork server, as `python -c "from multiprocessing.forkserver import main;
    main(...)"` runs it, with the command's streams, environment and directory; never returns."""
    stdin, stdout, stderr, listener, alive = request["fds"]
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    if request.get("netns"):
        enter_network_namespace(request["netns"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.sched_setaffinity(0, request["cpus"])
    tempfile.tempdir = None  # from the command's $TMPDIR, as a new interpreter's
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if "OMP_NUM_THREADS" in request["env"]:
        import torch

        torch.set_num_threads(int(request["env"]["OMP_NUM_THREADS"]))
    import multiprocessing.forkserver

    import catwalk_startup.exit_with_parent

    importlib.reload(catwalk_startup.exit_with_parent)  # reads the command's variable again
    tango_logging_from_environment()
    serve_fork_servers(request.get("netns"))  # a slot's own (it forks from this server)
    code = 0
    try:
        multiprocessing.forkserver.main(listener, alive, **request["forkserver"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    except BaseException:
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def enter_network_namespace(name: str) -> None:
    """This (forked, single-threaded) process joins the network namespace `ip netns` named, as
    `ip netns exec` would: its sockets are that host's from here on."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns into {name}")
    finally:
        os.close(fd)


def end(main: Any) -> None:
    """Runs the command's `main` and ends the process as interpreter shutdown ends it, in the
    order CPython's does (`Py_FinalizeEx`): the exit code of `sys.exit(main())` (an uncaught
    error printed, code 1; a message printed, code 1), the threads joined, `atexit`, the
    streams flushed, SIGINT re-raised after a KeyboardInterrupt; then `os._exit`, without
    tearing down the modules (what a command creates and must clean up registers with
    `atexit` or `weakref.finalize`, as it must for a real interpreter's shutdown too)."""
    import atexit
    import threading

    interrupted = False
    try:
        code = main()
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        interrupted, code = True, 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what shutdown waits for first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader gone
            stream.flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit((code or 0) & 0xFF)


if __name__ == "__main__":
    preload()
    # What the preload made lives as long as the server: out of the collector's sight, a
    # command's interpreter shutdown no longer walks (and copies, page by page, from this
    # process) all of it: 1.5-1.9 s of CPU per command, 0.4 s with it frozen.
    gc.freeze()
    request = serve(sys.argv[1])
    if "forkserver" in request:
        fork_server(request)
    end(become(request))
