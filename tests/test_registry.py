"""The registry on a real etcd (started by the ``etcd`` fixture) and in memory: agent records
under leases, expiry when the holder stops or is killed, re-registration after etcd restarts,
watches, and the errors for bad URLs and an unreachable etcd. Nothing is faked."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import etcd3gw
import pytest

from mlms.errors import InvalidArgument, Unavailable
from mlms.hardware import HardwareInfo
from mlms.registry.agents import list_agents, register_agent
from mlms.registry.base import AgentRecord, Lease, Registry
from mlms.registry.factory import registry_from_url
from tests.processes import free_port, port_held, wait_for
from tests.services import EtcdServer

#: etcd counts leases in whole seconds and refuses less than about 2 s.
ETCD_TTL = 2.0
MEMORY_TTL = 1.0  # keepalives every ttl/3 must survive a loaded 2-core CI machine
REPO = Path(__file__).resolve().parents[1]


def _record(agent_id: str | None = None, **changes) -> AgentRecord:
    values = {
        "agent_id": agent_id or uuid.uuid4().hex[:12],
        "address": f"127.0.0.1:{free_port()}",
        "framework": "torch",
        "framework_version": "2.14.1",
        "hardware": HardwareInfo(
            host="test-host",
            cpu_brand="Test CPU",
            cpu_cores_logical=2,
            cpu_cores_physical=1,
            memory_bytes=1 << 30,
            machine="x86_64",
        ),
        "models": ["digits_cnn", "resnet50"],
        "started_at": datetime.now(UTC),
    }
    return AgentRecord(**(values | changes))


def _eventually(condition: Callable[[], object], timeout: float, what: str) -> float:
    """Seconds until ``condition()`` is truthy; fails naming ``what`` after ``timeout``."""
    start = time.monotonic()
    wait_for(condition, timeout, what, every=0.02)
    return time.monotonic() - start


@pytest.fixture(params=["memory", "etcd"])
def kind(request) -> str:
    return request.param


@pytest.fixture
def registry(kind: str, request) -> Iterator[Registry]:
    url = "memory://" if kind == "memory" else request.getfixturevalue("running_etcd").url
    opened = registry_from_url(url)
    yield opened
    opened.close()


@pytest.fixture
def ttl(kind: str) -> float:
    return MEMORY_TTL if kind == "memory" else ETCD_TTL


def test_register_update_list_and_leave(registry: Registry, ttl: float) -> None:
    first, second = _record(), _record(framework="onnxruntime", framework_version="1.31.0")
    one = register_agent(registry, first, ttl)
    two = register_agent(registry, second, ttl)
    listed = {a.agent_id: a for a in list_agents(registry)}
    assert listed[first.agent_id] == first  # every field survives the round trip
    assert listed[second.agent_id].framework == "onnxruntime"
    assert isinstance(one.lease, Lease)

    one.update(first.model_copy(update={"in_flight": 3}))
    loads = {a.agent_id: a.in_flight for a in list_agents(registry)}
    assert loads[first.agent_id] == 3 and loads[second.agent_id] == 0

    one.close()  # leaves at once, not after the ttl
    assert registry.get(f"agents/{first.agent_id}") is None
    assert second.agent_id in {a.agent_id for a in list_agents(registry)}
    two.close()
    two.close()  # idempotent


def test_record_keeps_its_agent_id(registry: Registry, ttl: float) -> None:
    registration = register_agent(registry, _record("a-1"), ttl)
    with pytest.raises(InvalidArgument, match="'b-2'"):
        registration.update(_record("b-2"))
    registration.close()
    assert AgentRecord.model_validate_json(_record("a-1").model_dump_json()).id == "a-1"


def test_key_expires_after_ttl_when_keepalive_stops(registry: Registry, ttl: float) -> None:
    lease = registry.lease(ttl)
    key = f"agents/{uuid.uuid4().hex[:12]}"
    lease.put(key, b"{}")
    lease.abandon()  # what the holder's death looks like to the registry
    gone = _eventually(lambda: registry.get(key) is None, ttl + 1, f"{key} to expire")
    assert gone >= ttl * 0.5, f"{key} vanished after {gone:.2f}s, before its ttl of {ttl}s"


def test_keepalive_holds_keys_past_the_ttl(registry: Registry, ttl: float) -> None:
    lease = registry.lease(ttl)
    lease.put("jobs/held", b"running")
    deadline = time.monotonic() + 2.5 * ttl
    while time.monotonic() < deadline:
        assert registry.get("jobs/held") == b"running"
        time.sleep(ttl / 10)
    lease.close()
    assert registry.get("jobs/held") is None


def test_lease_keys_put_and_deleted(registry: Registry, ttl: float) -> None:
    lease = registry.lease(ttl)
    lease.put("jobs/a", b"1")
    lease.put("jobs/b", b"2")
    lease.delete("jobs/a")
    lease.delete("jobs/never-put")
    assert registry.get_prefix("jobs/") == {"jobs/b": b"2"}
    assert registry.get_prefix("agents/") == {}
    lease.close()
    assert registry.get_prefix("jobs/") == {}


def test_closing_the_registry_revokes_its_leases(running_etcd: EtcdServer) -> None:
    holder, observer = registry_from_url(running_etcd.url), registry_from_url(running_etcd.url)
    holder.lease(ETCD_TTL).put("agents/closing", b"{}")
    assert observer.get("agents/closing") == b"{}"
    holder.close()
    assert observer.get("agents/closing") is None
    observer.close()


def test_watch_sees_every_change(registry: Registry, ttl: float) -> None:
    seen: queue.Queue[dict[str, bytes]] = queue.Queue()
    watch = registry.watch_prefix("agents/", seen.put)

    def wait_for(condition: Callable[[dict[str, bytes]], bool], what: str) -> dict[str, bytes]:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                current = seen.get(timeout=0.1)
            except queue.Empty:
                continue
            if condition(current):
                return current
        raise AssertionError(f"no watch callback with {what} within 5s")

    assert wait_for(lambda d: True, "the initial state") == {}
    record = _record()
    key = f"agents/{record.agent_id}"
    registration = register_agent(registry, record, ttl)
    wait_for(lambda d: key in d, f"{key} registered")
    registration.update(record.model_copy(update={"in_flight": 2}))
    current = wait_for(
        lambda d: key in d and AgentRecord.model_validate_json(d[key]).in_flight == 2,
        "the new load",
    )
    assert set(current) == {key}
    registration.lease.put("jobs/not-watched", b"x")  # outside the prefix: no callback
    registration.close()
    assert wait_for(lambda d: True, "the leave") == {}
    watch.close()


def test_watch_callback_errors_do_not_stop_it(registry: Registry, ttl: float) -> None:
    calls: list[dict[str, bytes]] = []

    def flaky(current: dict[str, bytes]) -> None:
        calls.append(current)
        raise RuntimeError("a bug in the watcher")

    watch = registry.watch_prefix("agents/", flaky)
    lease = registry.lease(ttl)
    lease.put("agents/w1", b"1")
    _eventually(lambda: any("agents/w1" in c for c in calls), 5, "the first change")
    lease.put("agents/w2", b"2")
    _eventually(lambda: any("agents/w2" in c for c in calls), 5, "the second change")
    watch.close()
    lease.close()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "etcd://",
        "etcd://127.0.0.1",
        "etcd://127.0.0.1:port",
        "etcd://127.0.0.1:2379/prefix",
        "http://127.0.0.1:2379",
        "memory://somewhere",
        "127.0.0.1:2379",
    ],
)
def test_bad_registry_url(url: str) -> None:
    with pytest.raises(InvalidArgument, match=r"invalid registry URL .*expected etcd://HOST:PORT"):
        registry_from_url(url)


def test_bad_ttl_and_keys(registry: Registry) -> None:
    for ttl in (0, -1.0):
        with pytest.raises(InvalidArgument, match=f"invalid lease ttl {ttl!r}"):
            registry.lease(ttl)
    for key in ("/agents/x", "agents//x", "../x", ""):
        with pytest.raises(InvalidArgument, match="invalid registry key"):
            registry.get(key)


def test_unreachable_etcd_is_unavailable_naming_it() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    start = time.monotonic()
    with pytest.raises(Unavailable, match=f"etcd at {address} is unavailable") as caught:
        registry_from_url(f"etcd://{address}")
    assert str(caught.value).endswith("Connection refused")  # the cause, on one line
    assert time.monotonic() - start < 5


def test_etcd_down_then_back(running_etcd: EtcdServer) -> None:
    """Calls fail with Unavailable while etcd is down; a load update made meanwhile is
    published once it is back, and watches pick up again."""
    registry = registry_from_url(running_etcd.url)
    record = _record()
    key = f"agents/{record.agent_id}"
    registration = register_agent(registry, record, ETCD_TTL)
    seen: list[dict[str, bytes]] = []
    watch = registry.watch_prefix("agents/", seen.append)
    _eventually(lambda: any(key in s for s in seen), 5, "the watch to see the agent")

    running_etcd.stop()
    with pytest.raises(Unavailable, match=running_etcd.address):
        registry.get_prefix("agents/")
    with pytest.raises(Unavailable, match=running_etcd.address):
        registry.lease(ETCD_TTL)
    with pytest.raises(Unavailable):
        registration.update(record.model_copy(update={"in_flight": 5}))

    running_etcd.start()
    _eventually(
        lambda: any(
            a.agent_id == record.agent_id and a.in_flight == 5 for a in list_agents(registry)
        ),
        2 * ETCD_TTL,
        "the update made while etcd was down",
    )
    calls = len(seen)
    registration.close()
    _eventually(lambda: len(seen) > calls and key not in seen[-1], 5, "the watch to see it leave")
    watch.close()
    registry.close()


@pytest.mark.parametrize("wipe", [False, True], ids=["same-data", "data-lost"])
def test_agent_is_back_within_two_ttl_after_etcd_restart(
    running_etcd: EtcdServer, wipe: bool
) -> None:
    """Restarted with its data, etcd keeps the lease; restarted empty, the lease is gone and
    the registration grants a new one and puts the record again, by itself."""
    registry = registry_from_url(running_etcd.url)
    record = _record()
    registration = register_agent(registry, record, ETCD_TTL)
    granted = registration.lease.lease_id
    running_etcd.restart(wipe=wipe)
    back = _eventually(
        lambda: record.agent_id in {a.agent_id for a in list_agents(registry)},
        2 * ETCD_TTL,
        "the agent back in the registry",
    )
    print(f"agent back {back:.2f}s after etcd answered (wipe={wipe})")
    # Same data: the same lease lives on. Data lost: a new lease was granted.
    assert (registration.lease.lease_id != granted) == wipe
    registration.close()
    assert registry.get(f"agents/{record.agent_id}") is None
    registry.close()


def test_a_revoked_lease_is_granted_again_with_its_keys(running_etcd: EtcdServer) -> None:
    """Someone else revokes the lease (``etcdctl lease revoke``, or etcd expired it while the
    holder was cut off): the keys vanish, and the holder puts them back under a new lease."""
    registry = registry_from_url(running_etcd.url)
    lease = registry.lease(ETCD_TTL)
    lease.put("agents/revoked", b"a")
    lease.put("jobs/revoked", b"j")
    first = lease.lease_id
    operator = etcd3gw.Etcd3Client("127.0.0.1", running_etcd.port, api_path="/v3/")
    etcd3gw.Lease(first, operator).revoke()
    back = _eventually(
        lambda: registry.get_prefix("") == {"agents/revoked": b"a", "jobs/revoked": b"j"},
        ETCD_TTL,
        "both keys back",
    )
    print(f"keys back {back:.2f}s after the lease was revoked")
    assert lease.lease_id != first
    lease.close()
    registry.close()


_HOLDER = """
import sys, time
from datetime import UTC, datetime
from mlms.registry.agents import register_agent
from mlms.registry.base import AgentRecord
from mlms.registry.factory import registry_from_url
from mlms.hardware import detect
record = AgentRecord(agent_id=sys.argv[2], address="127.0.0.1:1", framework="torch",
                     framework_version="2", hardware=detect(), started_at=datetime.now(UTC))
register_agent(registry_from_url(sys.argv[1]), record, float(sys.argv[3]))
print("registered", flush=True)
time.sleep(600)
"""


def test_killed_holder_leaves_within_ttl_plus_one_second(running_etcd: EtcdServer) -> None:
    """A process holding a registration is kept past its ttl while alive, and after
    ``kill -9`` its record is gone within ttl + 1 s."""
    agent_id = f"killed-{uuid.uuid4().hex[:8]}"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, running_etcd.url, agent_id, str(ETCD_TTL)],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    registry = registry_from_url(running_etcd.url)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"registered"
        key = f"agents/{agent_id}"
        held_until = time.monotonic() + 1.5 * ETCD_TTL
        while time.monotonic() < held_until:  # alive: its keepalive holds the record
            assert registry.get(key) is not None, "the live holder's record expired"
            time.sleep(0.1)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        gone = _eventually(lambda: registry.get(key) is None, ETCD_TTL + 1, f"{key} to expire")
        print(f"killed holder's record gone {gone:.2f}s after kill -9 (ttl {ETCD_TTL}s)")
        assert time.monotonic() - killed <= ETCD_TTL + 1
    finally:
        if holder.poll() is None:
            holder.kill()
        registry.close()


def test_an_etcd_whose_port_was_taken_meanwhile_starts_on_other_ports(tmp_path) -> None:
    """The tests' etcd is given ports found free; one taken before etcd binds it (as another
    process's connection may take it) sends a first start to new ports, not to an error."""
    server = EtcdServer(tmp_path / "data")
    taken = server.port
    with port_held(taken):
        server.start()
    try:
        assert server.port != taken and server.address == f"127.0.0.1:{server.port}"
        assert "address already in use" in server.log.read_text()
        registry = registry_from_url(server.url)
        registry.close()
    finally:
        server.stop()
