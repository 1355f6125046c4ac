"""``mlms server --workers N``: N server processes on one port (SO_REUSEPORT), as real
processes: every connection answered, one worker's death ends the whole server in one line,
SIGTERM stops every worker, and a parent killed outright takes its workers with it."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.processes import MlmsProcess


@pytest.fixture
def workers(tmp_path: Path):
    process = MlmsProcess.serving(
        ["server", "--workers", "2", "--grace", "1"],
        tmp_path / "server.log",
        {"MLMS_HOME": str(tmp_path / "home")},
    )
    address = process.address()
    yield process, address
    process.stop()


def _serving(address: str) -> bool:
    """A fresh connection's health check: each new connection may land on another worker."""
    with grpc.insecure_channel(address) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    return answer.status == health_pb2.HealthCheckResponse.SERVING


def _workers_of(process: MlmsProcess) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(process.pid).children()
        if "spawn_main" in " ".join(child.cmdline())  # not the resource tracker
    ]


def test_workers_share_the_port_and_stop_together(workers) -> None:
    process, address = workers
    children = _workers_of(process)
    assert len(children) == 2
    port = int(address.rpartition(":")[2])
    listening = {
        c.pid
        for c in psutil.net_connections("tcp")
        if c.laddr.port == port and c.status == "LISTEN"
    }
    assert listening == {child.pid for child in children}  # the parent only holds the port
    assert all(_serving(address) for _ in range(20))
    process.popen.send_signal(signal.SIGTERM)
    assert process.popen.wait(30) == 0
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


def test_a_worker_that_dies_ends_the_server_in_one_line(workers) -> None:
    process, _ = workers
    first, second = _workers_of(process)
    first.kill()
    assert process.popen.wait(30) == 1
    last = process.output().strip().splitlines()[-1]
    assert last.startswith("mlms: error: server worker ") and "exited with status -9" in last
    assert not psutil.wait_procs([second], timeout=10)[1]


def test_workers_die_with_their_parent(workers) -> None:
    process, _ = workers
    children = _workers_of(process)
    process.kill()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


def test_a_bad_worker_count_is_one_line(tmp_path: Path) -> None:
    from tests.processes import run_mlms

    done = run_mlms(tmp_path, "server", "--workers", "0")
    assert done.returncode == 2
    assert "Invalid value for '--workers': 0 is not in the range 1<=x<=64" in done.stderr
