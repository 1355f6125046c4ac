"""The fleet on hosts of its own (``tests/netns_fleet.py``): etcd and S3 on one network
namespace, the server on another, each agent on its own, all over TLS with the addresses the
hosts have on a private subnet. What these check is what changes between machines: the
address an agent advertises, and links that go down while work streams over them.

Each test leaves the fleet as it found it (links up, every agent registered), so they pass in
any order and alone.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from mlms import errors
from mlms.evaluation.record import EvaluationRecord
from tests import netns
from tests.netns_fleet import MultiHostFleet, multihost_fleet, request, wait_until

TTL = 2.0
#: How long a silent peer takes to be noticed mid-stream: the channels' keepalive time (10 s)
#: plus its timeout (5 s), with room for a loaded machine.
KEEPALIVE_S = 25.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, store) -> Iterator[MultiHostFleet]:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("multihost")
    with multihost_fleet(root, agents=2, ttl=TTL, assets_from=store) as fleet:
        yield fleet


@pytest.fixture
def healthy(fleet: MultiHostFleet) -> Iterator[MultiHostFleet]:
    """The fleet; afterwards every link is up again, every agent back in the registry and
    idle. An agent cut off mid-evaluation runs its copy on in the dark; until that copy ends
    its published load steers the next test's least-loaded choice away from it."""
    yield fleet
    for host in fleet.network.hosts.values():
        host.heal()
    store = fleet.store_host
    fleet.server_host.mend(store)
    for name, process in fleet.agents.items():
        if not process.alive():
            fleet.start_agent(name)
    fleet.wait_agents()
    for name in fleet.agent_hosts:
        address = fleet.agent_address(name)
        wait_until(lambda a=address: _load(fleet, a) == 0, 120, f"agent {address} to be idle")


class Background:
    """An evaluation on a thread of its own; ``measuring`` is set once past its warm-up."""

    def __init__(self, fleet: MultiHostFleet, *, min_seconds: float) -> None:
        self.measuring = threading.Event()
        self.outcome: EvaluationRecord | BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fleet, min_seconds), daemon=True)
        self.thread.start()

    def _run(self, fleet: MultiHostFleet, min_seconds: float) -> None:
        try:
            with fleet.client() as client:
                self.outcome = client.evaluate(
                    request(iterations=10, min_seconds=min_seconds), self._progress
                )
        except BaseException as exc:
            self.outcome = exc

    def _progress(self, event) -> None:
        if event.run != "warmup" and not self.measuring.is_set():
            self.measuring.set()


def _agent_of_job(fleet: MultiHostFleet) -> tuple[str, str]:
    """(evaluation id, agent host name) of the one evaluation in flight."""
    with fleet.client() as client:
        [job] = client.list_evaluations().in_flight
    by_id = {agent_id: address for address, agent_id in fleet.registered().items()}
    address = by_id[job.agent_id]
    [name] = [n for n in fleet.agent_hosts if fleet.agent_address(n) == address]
    return job.evaluation_id, name


def _load(fleet: MultiHostFleet, address: str) -> int | None:
    """The in-flight count the agent at ``address`` publishes, None when not registered."""
    with fleet.client() as client:
        loads = {a.address: a.in_flight for a in client.list_agents()}
    return loads.get(address)


def _reach_every_agent(fleet: MultiHostFleet) -> set[str]:
    """The addresses of the agents that ran one of N overlapping evaluations (N agents): each
    starts once the one before measures, so the least-loaded choice gives each its own. A
    round can miss one without any fault: one evaluation finished before the next measured (a
    slow machine), or an agent was out of the registry for a moment (a starved machine late
    with its 2 s lease's keepalive). So up to three rounds are pooled: an agent the server
    cannot reach at its advertised address is in none of them."""
    every = {fleet.agent_address(name) for name in fleet.agent_hosts}
    reached: set[str] = set()
    for _round in range(3):
        running = []
        for number, _ in enumerate(fleet.agent_hosts, start=1):
            last = number == len(fleet.agent_hosts)
            running.append(Background(fleet, min_seconds=0.0 if last else 4.0))
            assert running[-1].measuring.wait(60), fleet.logs_text()
        for background in running:
            background.thread.join(120)
        outcomes = [b.outcome for b in running]
        assert all(isinstance(o, EvaluationRecord) for o in outcomes), outcomes
        reached |= {o.agent["address"] for o in outcomes}  # type: ignore[union-attr]
        if reached == every:
            break
    return reached


def test_agents_advertise_their_host_address(healthy: MultiHostFleet) -> None:
    fleet = healthy
    expected = {fleet.agent_address(name) for name in fleet.agent_hosts}
    assert set(fleet.registered()) == expected
    with fleet.client() as client:
        assert {a.address for a in client.list_agents()} == expected
    assert _reach_every_agent(fleet) == expected, fleet.logs_text()
    for address in expected:
        assert not address.startswith("127.")


def test_agent_partitioned_mid_evaluation(healthy: MultiHostFleet) -> None:
    """The agent's link goes down while it measures: it leaves the registry within its TTL,
    the evaluation finishes on the other agent under the same id (or fails naming the
    partition), the record is written once, and the agent is back by itself once its link
    is up again, reachable by the server."""
    fleet = healthy
    background = Background(fleet, min_seconds=4.0)
    assert background.measuring.wait(60), fleet.logs_text()
    evaluation_id, name = _agent_of_job(fleet)
    address = fleet.agent_address(name)
    host = fleet.agent_hosts[name]
    host.partition()
    cut_at = time.monotonic()
    try:
        wait_until(lambda: address not in fleet.registered(), TTL + 1, "the agent to leave")
        left_after = time.monotonic() - cut_at
        background.thread.join(KEEPALIVE_S + 60)
        outcome = background.outcome
        if isinstance(outcome, EvaluationRecord):
            assert outcome.id == evaluation_id  # the same evaluation, moved
            assert outcome.agent["address"] != address
            assert outcome.results[0].iterations >= 10
        else:
            assert isinstance(outcome, errors.MlmsError), outcome
            assert address in str(outcome) or "partition" in str(outcome), outcome
    finally:
        host.heal()
    healed_at = time.monotonic()
    wait_until(lambda: address in fleet.registered(), 2 * TTL, "the agent to come back")
    back_after = time.monotonic() - healed_at
    fleet.wait_agents(timeout=2 * TTL)
    assert left_after <= TTL + 1 and back_after <= 2 * TTL
    # The partitioned agent ran its copy on, in the dark; once that copy has ended (stored,
    # dropped or failed: its published load is 0 again), the record must still be the one
    # the client got, written once.
    wait_until(lambda: _load(fleet, address) == 0, 120, "the partitioned agent's copy to end")
    if isinstance(outcome, EvaluationRecord):
        with fleet.client() as client:
            assert client.get_evaluation(evaluation_id) == outcome
    assert fleet.record_versions().get(evaluation_id) == 1, fleet.logs_text()
    every = {fleet.agent_address(n) for n in fleet.agent_hosts}
    assert _reach_every_agent(fleet) == every, fleet.logs_text()


def test_every_agent_partitioned_the_evaluation_fails_naming_it(
    healthy: MultiHostFleet,
) -> None:
    """With nowhere left to move it, the evaluation fails, and the error says that its agent
    stopped answering (not only that no agent is left)."""
    fleet = healthy
    background = Background(fleet, min_seconds=4.0)
    assert background.measuring.wait(60), fleet.logs_text()
    _, name = _agent_of_job(fleet)
    for host in fleet.agent_hosts.values():
        host.partition()
    background.thread.join(KEEPALIVE_S + 60)
    outcome = background.outcome
    assert isinstance(outcome, errors.Unavailable), outcome
    message = str(outcome)
    assert f"at {fleet.agent_address(name)}: it stopped answering (a network partition" in message
    # The fixture heals the links; the agents come back by themselves.


def test_server_cut_from_etcd_refuses_new_work_then_resumes(healthy: MultiHostFleet) -> None:
    """The cut host holds etcd and S3, so the refusal names whichever the server needed first:
    etcd, to record the job, or S3, to check the client's token where its cached check is
    older than ``CACHE_S`` (a test without the fleet ran in between). The registry's refusal
    alone is checked in ``test_a_job_that_cannot_be_recorded_is_refused``."""
    fleet = healthy
    fleet.server_host.cut_from(fleet.store_host)
    try:
        with fleet.client() as client:
            started = time.monotonic()
            with pytest.raises(errors.Unavailable) as refused:
                client.evaluate(request())
            took = time.monotonic() - started
        message = str(refused.value)
        registry = fleet.registry_url.removeprefix("etcd://")
        s3 = fleet.store_url.removeprefix("s3://").split("/", 1)[0]
        assert (registry in message and "refusing new" in message) or (
            f"S3 endpoint {s3} is unreachable" in message and "auth/tokens/" in message
        ), message
        assert took < 15, took
    finally:
        fleet.server_host.mend(fleet.store_host)
    with fleet.client() as client:
        record = wait_until(lambda: client.evaluate(request()), 30, "the server to take work")
    assert record.agent["address"] in {fleet.agent_address(n) for n in fleet.agent_hosts}


def test_leftovers_of_a_dead_run_are_removed() -> None:
    """A run killed before its cleanup leaves namespaces and a bridge named after its pid; the
    next run removes them, and leaves those of live runs (this one's) alone."""
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(reason)
    gone = subprocess.Popen(["true"])
    gone.wait()
    namespace = f"{netns.PREFIX}-{gone.pid}-abcdef-left"
    bridge = f"mbabcdef{gone.pid}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    with netns.Network() as network:  # cleans leftovers as it starts
        mine = network.add_host("mine")
        assert namespace not in netns._namespaces()
        assert subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode
        assert mine.namespace not in netns.clean_leftovers()
        assert mine.namespace in netns._namespaces()
    assert mine.namespace not in netns._namespaces()


def test_without_root_the_reason_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns.shutil, "which", lambda name: f"/usr/sbin/{name}")
    assert netns.unavailable() == "network-namespace hosts need root (ip netns add, veth pairs)"
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    assert "need the `ip` command" in (netns.unavailable() or "")


def test_a_later_copy_of_a_dispatched_evaluation_is_dropped(store) -> None:
    """What the partition test found, without namespaces: two agents that ran one evaluation
    id (the server moved it) store it once; the later copy answers with the stored record."""
    from mlms.evaluation.runner import evaluate

    evaluation_id = uuid.uuid4().hex
    first = evaluate(request(), store=store, evaluation_id=evaluation_id, agent={"address": "a"})
    later = evaluate(request(), store=store, evaluation_id=evaluation_id, agent={"address": "b"})
    assert later == first and later.agent == {"address": "a"}
    own = evaluate(request(), store=store)  # not dispatched: an id of its own, stored
    assert own.id != evaluation_id and own.agent == {"mode": "embedded"}


class _CutLease:
    """A lease whose registry does not answer."""

    ttl = 2.0

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def put(self, key: str, value: bytes) -> None:
        raise errors.Unavailable("etcd at 10.0.0.2:2379 is unavailable (put): timed out")

    def refresh(self) -> None:
        raise errors.Unavailable("etcd at 10.0.0.2:2379 is unavailable (lease keepalive)")

    def delete(self, key: str) -> None:
        self.deleted.append(key)


def test_a_job_that_cannot_be_recorded_is_refused() -> None:
    from mlms.registry.memory import MemoryRegistry
    from mlms.server.jobs import Jobs

    registry = MemoryRegistry()
    lease = _CutLease()
    try:
        with pytest.raises(errors.Unavailable) as refused:
            Jobs(registry, lease, "s1").start("a" * 32, "digits_cnn")
    finally:
        registry.close()
    assert str(refused.value).startswith(
        f"server s1 cannot reach the registry {registry.url}, so it is refusing new evaluations"
    )
    assert lease.deleted == [f"jobs/{'a' * 32}"]  # not put once the registry answers again
