"""Helpers for tests that run mlms processes: free loopback ports, waiting on conditions,
and child processes whose output is kept for the failure message.

An ``mlms agent`` or ``mlms server`` that a test talks to picks its own port
(``MlmsProcess.serving``): a port picked here and handed over would be free only until the
process binds it, seconds later, and another process on the machine may take it meanwhile.
``free_port`` is for services that cannot say which port they took (etcd, PostgreSQL: started
through ``start_on_free_ports``, which moves them on when a port was taken meanwhile) and for
addresses where nothing is meant to listen."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def port_held(port: int) -> Iterator[None]:
    """Something listening on loopback ``port`` meanwhile: a port ``free_port`` found, taken
    before the service given it binds it."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        yield


#: First starts of a service on ports found free, before giving up (``start_on_free_ports``).
PORT_ATTEMPTS = 3


class PortTaken(RuntimeError):
    """A service exited because a port it was given was taken meanwhile."""


def start_on_free_ports(launch: Callable[[], T], repick: Callable[[], None]) -> T:
    """``launch()``, again on new ports (``repick()``) while it raises ``PortTaken``, up to
    ``PORT_ATTEMPTS`` times: for services that cannot pick their own port and say which (etcd,
    PostgreSQL), whose port from ``free_port`` may be taken before they bind it (another
    process's outgoing connection draws from the same range)."""
    for _ in range(PORT_ATTEMPTS - 1):
        try:
            return launch()
        except PortTaken:
            repick()
    return launch()


def wait_for(condition: Callable[[], T], timeout: float, what: str, every: float = 0.05) -> T:
    """The first truthy value of ``condition`` within ``timeout`` seconds, else fail naming it."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class ChildProcess:
    """A child process (``popen``) whose output goes to ``log``: what a test does to it."""

    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """``kill -9``: no goodbye to the registry, no flush."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.popen.returncode


#: ``python -m mlms`` as a terminal starts it, Ctrl-C (SIGINT) raising KeyboardInterrupt: a
#: suite started in the background has SIGINT ignored, which every child inherits.
FROM_A_TERMINAL = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'mlms'; from mlms.cli.main import main; main()"
)


class MlmsProcess(ChildProcess):
    """``python -m mlms ARGS`` with its output in a log file; ``ctrl_c``: as a terminal starts
    it, for a test that sends it SIGINT."""

    served: Path  # the address file of a process started by ``serving``

    def __init__(
        self, args: list[str], log: Path, env: dict[str, str] | None = None, ctrl_c: bool = False
    ) -> None:
        self.args = args
        self.log = log
        self._handle = open(log, "wb")  # noqa: SIM115 - closed in stop()
        command = ["-c", FROM_A_TERMINAL] if ctrl_c else ["-m", "mlms"]
        self.popen = subprocess.Popen(
            [sys.executable, *command, *args],
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    @classmethod
    def serving(cls, args: list[str], log: Path, env: dict[str, str] | None = None) -> MlmsProcess:
        """``mlms agent ...`` or ``mlms server ...`` (``args``) on a loopback port of its own
        choosing; ``address()`` waits for it."""
        served = log.with_suffix(".address")
        process = cls([*args, "--listen", "127.0.0.1:0", "--address-file", str(served)], log, env)
        process.served = served
        return process

    def address(self, timeout: float = 120) -> str:
        """Where a process started by ``serving`` serves, once it does (an agent: once it is
        registered); fails with its output if it ends first."""

        def written() -> str | None:
            if self.served.exists():
                return self.served.read_text()
            assert self.alive(), f"{self.args[0]} ended before serving:\n{self.output()}"
            return None

        return wait_for(written, timeout, f"the {self.args[0]} to serve ({self.log})")

    def stop(self) -> None:
        self.terminate()
        self._handle.close()


def run_mlms(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``mlms ARGS`` as a user runs it, in the home ``home`` (``env``: more variables), its
    output kept."""
    return subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MLMS_HOME": str(home), **env},
    )
