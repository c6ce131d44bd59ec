"""The server that tests/commands.py forks console commands from: `python -m tests.command_server
SOCKET`, started by the test process with `subprocess`, so it is an ordinary main interpreter
(no multiprocessing parent, no start method chosen) and so is every command forked from it.

It imports torch, transformers, Tango and this package once, prints `ready`, then serves one
request per connection on a Unix socket in a directory only its user can enter: a JSON line
naming the console script's entry point, its arguments, environment, working directory,
output files and network namespace, if any (data only, never a pickle). For each request a
handler process forks the command and answers with two JSON lines on the connection: the
command's pid, then its exit code, as `subprocess` reports it (negative: killed by that
signal). The command leaves the server's loop and ends as `python -c "sys.exit(main())"` would:
interpreter shutdown runs `atexit`, prints an uncaught error, and re-raises SIGINT after a
KeyboardInterrupt.

The server stops when its standard input closes (the test process is gone).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
from typing import Any

COMMAND_MODULES = (
    "catwalk_steps.launch.launcher",
    "tango.__main__",
    "catwalk_steps.commands.export",
    "catwalk_steps.commands.worker",
    "catwalk_steps.commands.clear_step",
    "tests.exit_cases",
)


def preload() -> None:
    from catwalk_steps.launch.launcher import PRELOAD

    for module in (*PRELOAD, *COMMAND_MODULES):
        importlib.import_module(module)


def serve(path: str) -> dict[str, Any]:
    """Accepts requests until stdin closes (then exits); returns only in a forked command, with
    its request."""
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
    request = json.loads(connection.makefile("r").readline())
    pid = os.fork()
    if pid == 0:
        connection.close()
        return request
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
    sys.argv = list(request["argv"])
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a foreground job starts
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if "OMP_NUM_THREADS" in request["env"]:
        import torch

        torch.set_num_threads(int(request["env"]["OMP_NUM_THREADS"]))
    module, _, function = request["target"].partition(":")
    return getattr(importlib.import_module(module), function)


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


if __name__ == "__main__":
    preload()
    main = become(serve(sys.argv[1]))
    sys.exit(main())
