"""Bad requests to a fork server's socket (tests/test_fork_requests.py); the standard library
only, as a new interpreter sends them too."""

from __future__ import annotations

import os
import socket

# What ended Python's own fork server (3.11), one connection each.
KINDS = ("bytes", "closed at once", "one descriptor", "a count that differs", "forged")


def forged(payload: bytes) -> tuple[list[int], list[int]]:
    """Four pipes as a request carries them, but none the server's "alive" pipe (its read end
    closed here: no process holds it), the first holding `payload`, which a process forked for
    the request would unpickle: (the descriptors to send, those to close after)."""
    (start_r, start_w), (report_r, report_w), (alive_r, alive_w), (tracker_r, tracker_w) = [
        os.pipe() for _ in range(4)
    ]
    os.close(alive_r)
    os.write(start_w, payload)
    return [start_r, report_w, alive_w, tracker_w], [start_w, report_r, tracker_r]


def send(kind: str, connection: socket.socket, payload: bytes = b"") -> list[int]:
    """Sends one kind of bad request (`silent`: nothing); returns the descriptors to close
    once it is sent."""
    if kind == "bytes":
        connection.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return []
    if kind in ("closed at once", "silent"):
        return []
    null = os.open(os.devnull, os.O_RDONLY)
    if kind == "one descriptor":
        socket.send_fds(connection, [b"\x01"], [null])
        return [null]
    if kind == "a count that differs":
        socket.send_fds(connection, [b"\x07"], [null] * 4)
        return [null]
    assert kind == "forged", kind
    fds, others = forged(payload)
    socket.send_fds(connection, [bytes([len(fds)])], fds)
    return [null, *fds, *others]
