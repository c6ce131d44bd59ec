"""How the workers of every node find each other: the rendezvous store and its settings.

On one node the store is a file in a private directory (no port at all). Several nodes meet at
node 0's `TCPStore`, whose port is bound once: the launcher holds its server (on the port the
launch names), so no port is picked first and bound later by someone else.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from tango.common.exceptions import ConfigurationError

from ..run_temp import run_temp_dir


@dataclass(frozen=True)
class Rendezvous:
    """How the workers of all nodes find each other: node 0's store, and the time limits.

    On one node the store is a file in a directory only the run's user can enter (`file`):
    nothing listens, so no other user of the machine can reach it. Several nodes meet at node
    0's TCP store (`host`, `port`), which any process that reaches the port can read and write
    (docs/nodes.md)."""

    host: str = "127.0.0.1"
    port: int = 0
    num_nodes: int = 1
    join_timeout_s: float = 300.0
    collective_timeout_s: float = 1800.0
    file: str = ""  # one node: the FileStore's path, set by the launcher


@contextlib.contextmanager
def private_store_file() -> Iterator[str]:
    """The path of a FileStore in a new directory that only this user can enter (0700), inside
    the run's (:mod:`catwalk_steps.run_temp`), removed with everything in it afterwards."""
    directory = tempfile.mkdtemp(prefix="catwalk-rendezvous-", dir=run_temp_dir())
    try:
        yield str(Path(directory) / "store")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def open_file_store(path: str, timeout_s: float) -> dist.FileStore:
    store = dist.FileStore(path, -1)  # users not counted: the launcher removes the file
    store.set_timeout(datetime.timedelta(seconds=timeout_s))
    return store


def rendezvous_settings(
    num_nodes: int, address: str | None, port: int | None, timeout_s: float, step: str = "train"
) -> Rendezvous:
    """Where the nodes meet. One node listens on 127.0.0.1 on a port the OS picks; several take
    the address and port from the config or the standard `MASTER_ADDR` / `MASTER_PORT`
    (`step`: the step whose keys an error names)."""
    if num_nodes == 1:
        return Rendezvous(host=address or "127.0.0.1", port=port or 0, join_timeout_s=timeout_s)
    address = address or os.environ.get("MASTER_ADDR")
    port = port or (int(os.environ["MASTER_PORT"]) if os.environ.get("MASTER_PORT") else None)
    if not address or not port:
        raise ConfigurationError(
            f"{step}.master_addr / {step}.master_port: num_nodes > 1 needs node 0's address and a "
            "port (set them, or MASTER_ADDR and MASTER_PORT as SLURM and torchrun do)"
        )
    return Rendezvous(host=address, port=port, num_nodes=num_nodes, join_timeout_s=timeout_s)


def free_port() -> int:
    """A TCP port nobody listens on now. Racy by nature (someone may take it before it is
    bound): prefer :func:`start_store`, which binds its port itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_store(
    world_size: int, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 300.0
) -> dist.TCPStore:
    """The rendezvous store's server, held by the launcher; port 0 lets the OS choose one.

    It listens on `host`'s interface only (loopback for a job on one machine), not on every
    interface as a `TCPStore` server does by default: the socket is bound here and handed to it.
    Workers connect with :func:`connect_store` to `store.port`.
    """
    listener = listening_socket(host, port)
    try:
        return _tcp_store(
            host,
            listener.getsockname()[1],
            world_size,
            timeout_s,
            is_master=True,
            wait_for_workers=False,
            master_listen_fd=listener.detach(),
        )
    finally:
        listener.close()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on `host`'s address (this machine must have it) and `port`."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise ConfigurationError(f"train.master_addr: cannot resolve {host!r} ({e})") from None
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
        listener.listen()
    except OSError as e:
        listener.close()
        raise ConfigurationError(
            f"train.master_addr / master_port: cannot listen on {host}:{port} on this machine, "
            f"node 0 ({e.strerror or e}); give node 0's own address and a free port"
        ) from None
    return listener


def wait_for_listener(host: str, port: int, timeout_s: float) -> float:
    """Waits until something listens at `host:port` (one plain TCP connection a second, closed
    at once), at most `timeout_s`; returns the seconds left, or 0 when none answered. torch's
    own client retries with back-off past its timeout (18 s for 10 s here), so a deadline
    cannot be left to it."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return 0.0
        try:
            with socket.create_connection((host, port), timeout=min(1.0, left)):
                return max(deadline - time.monotonic(), 1.0)
        except OSError:
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))


def connect_store(host: str, port: int, world_size: int, timeout_s: float) -> dist.TCPStore:
    """A client of the launcher's store (retries until `timeout_s` if it is not up yet)."""
    return _tcp_store(host, port, world_size, timeout_s, is_master=False)


def _tcp_store(
    host: str, port: int, world_size: int, timeout_s: float, **kwargs: Any
) -> dist.TCPStore:
    timeout = datetime.timedelta(seconds=timeout_s)
    return dist.TCPStore(host, port, world_size, timeout=timeout, use_libuv=True, **kwargs)


def interface_towards(address: str) -> str | None:
    """The network interface this machine reaches `address` through (its IPv4 route), or None
    when that cannot be told (no route, not Linux).

    gloo connects every pair of ranks on the address of an interface it picks itself: by
    default the machine's hostname resolved, which on many hosts (and in every network
    namespace) is a loopback address the other nodes cannot reach, and the run hangs until
    its timeout with "Connection refused, remote=[127.0.0.1]". The interface that reaches node 0
    is the one the other nodes can reach this one on."""
    import fcntl
    import struct

    try:
        family = socket.getaddrinfo(address, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((family, 9))  # UDP: nothing is sent, the route is chosen
            local = probe.getsockname()[0]
            for _, name in socket.if_nameindex():
                request = struct.pack("256s", name[:15].encode())
                try:
                    answer = fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
                except OSError:
                    continue  # no IPv4 address
                if socket.inet_ntoa(answer[20:24]) == local:
                    return name
    except OSError:
        return None
    return None


def gloo_interface(rendezvous: Rendezvous) -> str | None:
    """The interface gloo should use on this node when several nodes meet (see
    :func:`interface_towards`); None when the user chose one (`GLOO_SOCKET_IFNAME`) or one node
    trains alone."""
    if rendezvous.num_nodes == 1 or os.environ.get("GLOO_SOCKET_IFNAME"):
        return None
    return interface_towards(rendezvous.host)
