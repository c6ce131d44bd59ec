"""The fork server refuses a request it cannot use, and goes on serving.

Training workers and `--parallelism`'s slots fork from multiprocessing's fork server
(`catwalk_steps/launch/launcher.py`). It serves requests on a Unix socket: each carries
descriptors (a pipe the new process reads its start from, one it reports on, the server's
"alive" pipe, the resource tracker's), and the process forked for it unpickles what the first
pipe holds. Python's server (3.10 to 3.13) goes on after an aborted connection only; any other
fault of a request ended it, and the step: bytes without descriptors (RuntimeError), a
connection closed at once (EOFError), one descriptor (ValueError), a count that differs
(AssertionError). Its socket closed while it shut down (seconds, torch imported), so workers
starting then failed with ConnectionRefusedError; after that, multiprocessing silently started
a new server outside the run's directory. A connection that sent nothing held it for good, and
any two descriptors made it fork.

In a process that imported this module, the name the server's loop reads requests through
(`multiprocessing.forkserver.reduction.recvfds`) is :func:`receive_request`: a request is used
only if it comes within `TIMEOUT_S`, with 4 to 256 descriptors and their count, the new
process's two pipes the right way round, and the write end of the server's own "alive" pipe,
which only the process that started the server and the processes forked from it hold: no other
process's request makes it fork, let alone unpickle. Anything else is refused in one line on
the server's standard error, every descriptor it carried closed, and the loop goes on (the
refusal is the ECONNABORTED it steps over). Other users cannot connect at all: the socket is a
path (not Linux's abstract namespace), mode 0600, in a directory of the run's own (0700,
:mod:`catwalk_steps.run_temp`). The server imports it before it serves (`PRELOAD`); Linux only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import multiprocessing.forkserver as forkserver
import os
import socket
import stat
import sys
from multiprocessing import reduction
from typing import Any

from . import checked
from .patching import patch

PATCH = "the fork server refuses malformed requests"
TIMEOUT_S = 5.0  # a client sends its request as soon as it connects
READS_WITH = "reduction"  # the module forkserver's loop calls `recvfds` of (not in its stub)
# The descriptors a request starts with (`ForkServer.connect_to_new_process`, Python 3.10-3.13).
PIPES = (
    ("the read end of a pipe (the new process's start)", os.O_RDONLY),
    ("the write end of a pipe (the new process's pid and exit code)", os.O_WRONLY),
    ("the write end of the server's 'alive' pipe", os.O_WRONLY),
    ("the write end of the resource tracker's pipe", os.O_WRONLY),
)


def receive_request(connection: socket.socket, size: int) -> list[int]:
    """A request's descriptors, as `multiprocessing.reduction.recvfds(connection, size)`
    returns them, if it is one the server can serve; else its descriptors closed, one line on
    standard error, and ConnectionAbortedError (ECONNABORTED: the server's loop goes on)."""
    fds: list[int] = []
    try:
        connection.settimeout(TIMEOUT_S)
        data, fds, flags, _ = socket.recv_fds(connection, 1, size)
        problem = request_problem(data, fds, flags & socket.MSG_CTRUNC)
    except TimeoutError:
        problem = f"nothing sent within {TIMEOUT_S:g} s"
    except OSError as e:
        problem = f"{type(e).__name__}: {e}"
    if problem is None:
        return fds
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    line = f"catwalk_steps: the fork server refused a request ({problem}); it goes on serving"
    print(line, file=sys.stderr, flush=True)
    raise ConnectionAbortedError(errno.ECONNABORTED, line)


def request_problem(data: bytes, fds: list[int], truncated: int) -> str | None:
    """What is wrong with a request (`truncated`: it had more descriptors than were asked
    for), or None."""
    if not data and not fds:
        return "the connection closed without one"
    most = forkserver.MAXFDS_TO_SEND
    if truncated or not len(PIPES) <= len(fds) <= most:
        count = f"over {len(fds)}" if truncated else str(len(fds))
        return f"{count} descriptors, where a request has {len(PIPES)} to {most}"
    if data != bytes([len(fds) % 256]):
        return f"{data[:16]!r} for its count of {len(fds)} descriptors"
    for position, (what, mode) in enumerate(PIPES):
        if pipe_end(fds[position]) != mode:
            return f"its descriptor {position} is not {what}"
    if not reads_from(fds[2], fds):
        return "its descriptor 2 is a pipe of another process's, not the server's 'alive' pipe"
    return None


def pipe_end(fd: int) -> int | None:
    """O_RDONLY or O_WRONLY for an end of a pipe (or FIFO), None for anything else."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        return None


def reads_from(fd: int, received: list[int]) -> bool:
    """Whether this process holds, among descriptors it was not just sent, the read end of
    the pipe `fd` writes to."""
    pipe = os.fstat(fd)
    for name in os.listdir("/proc/self/fd"):
        own = int(name)
        if own in received or pipe_end(own) != os.O_RDONLY:
            continue
        with contextlib.suppress(OSError):
            mine = os.fstat(own)
            if (mine.st_dev, mine.st_ino) == (pipe.st_dev, pipe.st_ino):
                return True
    return False


class _Reduction:
    """`multiprocessing.reduction` as the fork server's module sees it, but for its requests."""

    recvfds = staticmethod(receive_request)

    def __getattr__(self, name: str) -> Any:
        return getattr(reduction, name)


def install() -> None:
    """The server's loop reads requests through :func:`receive_request` (in this process and
    those forked from it; a client only sends through the name, which stays the same). On a
    Python it was not checked against, nothing: the launcher refuses to start a server there
    (`catwalk_startup.patching.check_version("python", PATCH)`), in one line."""
    if sys.platform == "linux" and checked.is_checked("python", checked.installed("python")):
        patch(forkserver, READS_WITH, PATCH, lambda _: _Reduction(), package="python")


install()
