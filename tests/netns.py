"""Hosts for tests as Linux network namespaces on one private subnet.

``Network`` makes a bridge in this (the root) namespace with the subnet's first address, which
is where the test process itself talks from, and ``add_host`` a namespace joined to it by a
veth pair, with its own address and a loopback. Processes start inside a host with
``ip netns exec`` (which execs, so the ``Popen``'s pid is the program's own and ``kill -9``
reaches it).

Faults, without ``tc netem`` (not available here):

- ``Host.partition()`` sets the bridge's end of the host's veth down: every packet to or from
  the host is dropped silently, as when a switch port or a cable goes, and no TCP reset tells
  the peers. ``heal()`` sets it up again.
- ``Host.cut_from(other)`` drops the traffic between two hosts only, by blackhole routes in
  both namespaces (each side's replies to the other vanish; the peers just stop answering).

Names carry this process's id (``mlmsnet-<pid>-<tag>-<host>``, the bridge ``mb<tag><pid>``)
so that ``clean_leftovers()`` can remove what a crashed or killed run left behind without
touching a live run's hosts. ``close()`` kills every process still inside a host, then removes
the namespaces and the bridge; it is safe to call twice and after a failed start.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import ChildProcess

PREFIX = "mlmsnet"
_NAME = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]{{6}})-")
#: ``mb<tag><pid>``: 15 characters at most, the kernel's limit for a link's name.
_BRIDGE = re.compile(r"mb[0-9a-f]{6}(\d{1,7})")
#: The /16 the subnets come from: private, and unlikely to be routed on a test machine.
SUPERNET = ipaddress.ip_network("10.213.0.0/16")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (for a skip), or None when they can."""
    if shutil.which("ip") is None:
        return "network-namespace hosts need the `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "network-namespace hosts need root (ip netns add, veth pairs)"
    probe = f"{PREFIX}-{os.getpid()}-{uuid.uuid4().hex[:6]}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(namespace: str) -> None:
    """kill -9 every process in ``namespace`` and wait until they are gone."""
    for _ in range(50):
        listed = _ip("netns", "pids", namespace, check=False)
        pids = [int(p) for p in listed.stdout.split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)  # reaping is the parent's; poll until the kernel lets them go


def clean_leftovers() -> list[str]:
    """Remove the namespaces and bridges of runs whose process is gone; the removed names."""
    removed = []
    for name in _namespaces():
        found = _NAME.match(name)
        if found is None or _alive(int(found.group(1))):
            continue
        _kill_inside(name)
        _ip("netns", "del", name, check=False)
        removed.append(name)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        bridge = line.split(":")[1].strip()
        found = _BRIDGE.fullmatch(bridge)
        if found is not None and not _alive(int(found.group(1))):
            _ip("link", "del", bridge, check=False)
            removed.append(bridge)
    return removed


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines()]


def _free_subnet() -> ipaddress.IPv4Network:
    used = _ip("-4", "-o", "addr", "show", check=False).stdout
    taken = {
        ipaddress.ip_interface(m).network
        for m in re.findall(r"inet (\S+)", used)
        if ipaddress.ip_interface(m).ip in SUPERNET
    }
    choices = [n for n in SUPERNET.subnets(new_prefix=24) if n not in taken]
    return random.SystemRandom().choice(choices[1:])


@dataclass
class HostProcess(ChildProcess):
    """A program running inside a host, its output in ``log``."""

    host: Host
    argv: list[str]
    log: Path
    popen: subprocess.Popen


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    link: str  # the bridge's end of the veth pair, in the root namespace
    processes: list[HostProcess] = field(default_factory=list)

    def start(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> HostProcess:
        handle = open(log, "ab")  # noqa: SIM115 - the child holds it; closed below
        try:
            popen = subprocess.Popen(
                ["ip", "netns", "exec", self.namespace, *argv],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        finally:
            handle.close()
        process = HostProcess(self, argv, log, popen)
        self.processes.append(process)
        return process

    def partition(self) -> None:
        """Drop every packet to and from this host (its link is down at the bridge)."""
        _ip("link", "set", self.link, "down")

    def heal(self) -> None:
        _ip("link", "set", self.link, "up")

    def cut_from(self, other: Host) -> None:
        """Drop the traffic between this host and ``other`` only."""
        for a, b in ((self, other), (other, self)):
            _ip("-n", a.namespace, "route", "replace", "blackhole", f"{b.address}/32")

    def mend(self, other: Host) -> None:
        for a, b in ((self, other), (other, self)):
            _ip("-n", a.namespace, "route", "del", "blackhole", f"{b.address}/32", check=False)


class Network:
    """A bridge and the hosts on it; use as a context manager or call ``close()``."""

    def __init__(self) -> None:
        clean_leftovers()
        self.tag = uuid.uuid4().hex[:6]
        self.subnet = _free_subnet()
        self.bridge = f"mb{self.tag}{os.getpid()}"
        addresses = self.subnet.hosts()
        self.address = str(next(addresses))  # this process's, on the bridge
        self._addresses = addresses
        self.hosts: dict[str, Host] = {}
        self._closed = False
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.address}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def add_host(self, name: str) -> Host:
        if not re.fullmatch(r"[a-z0-9]{1,12}", name):
            raise ValueError(f"host name {name!r}: expected up to 12 lowercase letters or digits")
        namespace = f"{PREFIX}-{os.getpid()}-{self.tag}-{name}"
        link = f"mv{self.tag}{len(self.hosts)}"
        address = str(next(self._addresses))
        _ip("netns", "add", namespace)
        host = Host(name, namespace, address, link)
        self.hosts[name] = host  # closed with the network from here on
        _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", link, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        return host

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for host in self.hosts.values():
            _kill_inside(host.namespace)
            for process in host.processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.popen.wait(5)  # reap: no zombies left behind in the test process
            _ip("netns", "del", host.namespace, check=False)  # takes its veth pair with it
        _ip("link", "del", self.bridge, check=False)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
