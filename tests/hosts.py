"""Several hosts on one machine, for tests: Linux network namespaces, each with an address of its
own on a private bridge, the way container-networking projects test theirs.

`Hosts(n)` makes a "switch" namespace holding a bridge and n host namespaces, each joined to it
by a veth pair and given `10.213.0.<k+1>/24` (and loopback). Nothing changes in the machine's
own namespace (no interface, no route, no address): traffic between the hosts stays on the
bridge, and a host can reach nothing but the other hosts. A command runs on a host with
`ip netns exec` (:meth:`Hosts.command`). Everything is removed by :meth:`Hosts.close` (the
fixture calls it, also when a test fails or is interrupted), and namespaces left by a test
process that died are removed when the next one starts.

Where namespaces cannot be made (not root, no `ip`, no CAP_NET_ADMIN), :func:`hosts_or_skip`
skips the test with one line saying why.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

PREFIX = "catwalk-test-"
SUBNET = "10.213.0"
_counter = itertools.count()


def run_ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True, text=True, timeout=30)


def cannot_make_hosts() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns); the multi-host tests are skipped"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2); the multi-host tests are skipped"
    return None


def remove_stale() -> None:
    """Namespaces of earlier test processes that are gone (killed before their teardown)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX) :].split("-")[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


class Hosts:
    """`count` hosts on one private bridge (see the module)."""

    def __init__(self, count: int, extra_addresses: dict[int, list[str]] | None = None):
        remove_stale()
        self.tag = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        self.switch = f"{self.tag}-sw"
        self.names = [f"{self.tag}-h{k}" for k in range(count)]
        self.addresses = [f"{SUBNET}.{k + 1}" for k in range(count)]
        self.made: list[str] = []
        try:
            self._make(extra_addresses or {})
        except BaseException:
            self.close()
            raise

    def _make(self, extra_addresses: dict[int, list[str]]) -> None:
        for name in (self.switch, *self.names):
            run_ip("netns", "add", name)
            self.made.append(name)
        run_ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        run_ip("-n", self.switch, "link", "set", "br0", "up")
        for k, (name, address) in enumerate(zip(self.names, self.addresses, strict=True)):
            run_ip("link", "add", "name", "eth0", "netns", name, "type", "veth", "peer", "name",
                   f"port{k}", "netns", self.switch)  # fmt: skip
            run_ip("-n", self.switch, "link", "set", f"port{k}", "master", "br0")
            run_ip("-n", self.switch, "link", "set", f"port{k}", "up")
            run_ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            for extra in extra_addresses.get(k, []):
                run_ip("-n", name, "addr", "add", f"{extra}/24", "dev", "eth0")
            run_ip("-n", name, "link", "set", "eth0", "up")
            run_ip("-n", name, "link", "set", "lo", "up")

    def command(self, host: int, argv: list[str]) -> list[str]:
        """`argv` as it runs on host `host`, a fresh process (for `subprocess`)."""
        return ["ip", "netns", "exec", self.names[host], *argv]

    def start(self, host: int, argv: list[str], out: Path):
        """A console command on host `host` (forked from the command server, which joins the
        host's namespace: tests/commands.py)."""
        from . import commands

        return commands.start(argv, out, netns=self.names[host])

    def run(self, host: int, argv: list[str], timeout: float = 120):
        from . import commands

        return commands.run(argv, timeout=timeout, netns=self.names[host])

    def processes(self, host: int) -> list[int]:
        """The processes running in host `host`'s network namespace now (with their commands:
        :meth:`describe`)."""
        listed = subprocess.run(
            ["ip", "netns", "pids", self.names[host]], capture_output=True, text=True
        ).stdout
        return [int(pid) for pid in listed.split()]

    def describe(self, host: int) -> list[str]:
        found = []
        for pid in self.processes(host):
            with contextlib.suppress(OSError):
                found.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes()[:200].decode())
        return found

    def left_behind(self, timeout: float = 20.0) -> list[str]:
        """The processes still running on any host once `timeout` has passed (a fork server
        notices its parent's exit within a second or two: waited for)."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            found = [p for host in range(len(self.names)) for p in self.describe(host)]
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.5)

    def link_down(self, host: int) -> None:
        """Host `host` loses its network (its cable pulled), its processes running on."""
        run_ip("-n", self.names[host], "link", "set", "eth0", "down")

    def close(self) -> None:
        """Every process left in the hosts killed, every namespace removed."""
        for name in self.names:
            if name in self.made:
                listed = subprocess.run(
                    ["ip", "netns", "pids", name], capture_output=True, text=True
                ).stdout
                for pid in map(int, listed.split()):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.made = []


def hosts_or_skip(count: int, **kwargs) -> Hosts:
    reason = cannot_make_hosts()
    if reason is not None:
        pytest.skip(reason)
    try:
        return Hosts(count, **kwargs)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"network namespaces cannot be made here ({e.stderr.strip()[:100]})")
