"""The server's caches of answers (records by id; listings of evaluations, models and agents,
each while its source is unchanged), the index read that listings share and the jobs in flight
they name from memory; the listings' invalidation on each kind of change, through real servers
on one registry (in memory, and a real etcd) and store."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx
import pytest

from mlms.assets.file_models import ModelOptions
from mlms.catalog.resolve import all_models
from mlms.errors import EvaluationInFlight, Unavailable, UnknownEvaluation
from mlms.protos.mlms.v2 import evaluator_pb2
from mlms.registry.agents import register_agent
from mlms.registry.memory import MemoryRegistry
from mlms.remote_client import RemoteClient
from mlms.server import service as service_module
from mlms.server.caches import ListingCache, record_cache
from mlms.server.process import Server, ServerConfig
from mlms.server.shared_reads import SharedRead
from tests.evaluation_copies import real_record
from tests.processes import wait_for
from tests.test_selection import _agent


def _page(total: int) -> evaluator_pb2.ListEvaluationsResponse:
    return evaluator_pb2.ListEvaluationsResponse(total=total)


def test_a_listing_is_answered_while_the_generation_holds() -> None:
    cache = ListingCache(size=2)
    cache.put(b"q", "g1", _page(1))
    assert cache.get(b"q", "g1") == _page(1)
    assert cache.get(b"q", "g2") is None  # the index changed since
    assert cache.get(b"other", "g1") is None
    cache.put(b"q", "g2", _page(2))
    assert cache.get(b"q", "g2") == _page(2)


def test_no_generation_caches_nothing() -> None:
    cache = ListingCache()
    cache.put(b"q", None, _page(1))
    assert len(cache) == 0 and cache.get(b"q", None) is None


def test_a_listing_expires_whatever_the_generation() -> None:
    cache = ListingCache(max_age=0.0)
    cache.put(b"q", "g1", _page(1))
    assert cache.get(b"q", "g1") is None


def test_both_caches_are_bounded_least_recently_used_out_first() -> None:
    records = record_cache(2)
    for key in ("a", "b"):
        records.put(key, _page(0))
    assert records.get("a") is not None  # "b" is now the least recently used
    records.put("c", _page(0))
    assert records.get("b") is None and records.get("a") is not None and len(records) == 2
    assert len(record_cache(0)) == 0
    listings = ListingCache(size=0)
    listings.put(b"q", "g", _page(1))
    assert listings.get(b"q", "g") is None


def test_a_shared_read_is_never_older_than_its_call() -> None:
    """Calls that arrive while a read runs wait for the next read and share it; each gets a
    read that began after it did."""
    began = threading.Event()
    release = threading.Event()
    reads: list[int] = []

    def read() -> int:
        reads.append(len(reads) + 1)
        if len(reads) == 1:
            began.set()
            release.wait(10)
        return len(reads)

    shared = SharedRead(read)
    with ThreadPoolExecutor(max_workers=9) as pool:
        first = pool.submit(shared.get)
        assert began.wait(10)
        later = [pool.submit(shared.get) for _ in range(8)]
        release.set()
        assert first.result(10) == 1
        assert {f.result(10) for f in later} == {2}  # one read more, shared by all eight
    assert reads == [1, 2]
    assert shared.get() == 3  # alone: a read of its own


def test_a_shared_read_hands_its_error_to_every_caller() -> None:
    answers = iter([Unavailable("registry down"), 7])

    def read() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    shared = SharedRead(read)
    with pytest.raises(Unavailable, match="registry down"):
        shared.get()
    assert shared.get() == 7


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[Server, Server, MemoryRegistry]]:
    """Two servers on one registry, store and index, as a fleet runs them."""
    registry = MemoryRegistry()
    config = ServerConfig(store=str(tmp_path / "store"))
    servers = [Server(config, registry=registry).start() for _ in range(2)]
    try:
        yield servers[0], servers[1], registry
    finally:
        for server in servers:
            server.stop(0)
        registry.close()


def _names(client: RemoteClient) -> set[str]:
    return {m.name for m in client.list_models()}


def test_models_are_listed_from_memory_until_any_server_changes_them(
    two_servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ListModels is built once per change of the added models: a model added through one
    server is listed at once by it and, through the registry's watch, by the other; removed
    through the other, it leaves both listings."""
    first, second, _ = two_servers
    built = []
    monkeypatch.setattr(
        service_module, "all_models", lambda *a, **k: built.append(1) or all_models(*a, **k)
    )
    model = tmp_path / "flat.onnx"
    onnx.save(_flatten_model(), model)
    with (
        RemoteClient(f"127.0.0.1:{first.port}") as one,
        RemoteClient(f"127.0.0.1:{second.port}") as other,
    ):
        zoo = _names(one)
        assert _names(one) == zoo and _names(other) == zoo
        assert len(built) == 2  # once a server
        one.add_model(model, ModelOptions(name="flat"))
        assert _names(one) == zoo | {"flat"}
        wait_for(lambda: _names(other) == zoo | {"flat"}, 10, "the other server to list it")
        assert other.remove_model("flat") == ["1"]
        assert _names(other) == zoo
        wait_for(lambda: _names(one) == zoo, 10, "the first server to drop it")
        built.clear()
        assert _names(one) == zoo and _names(other) == zoo
        assert not built


def test_agents_are_listed_from_memory_until_the_registry_changes(two_servers) -> None:
    first, _, registry = two_servers
    with RemoteClient(f"127.0.0.1:{first.port}") as client:
        assert client.list_agents() == []
        version = first.fleet.version()
        assert client.list_agents() == [] and first.fleet.version() == version
        registration = register_agent(registry, _agent("a", "torch", "2.14.1"), 10.0)
        wait_for(lambda: [a.id for a in client.list_agents()] == ["a"], 10, "the agent listed")
        registration.close()
        wait_for(lambda: client.list_agents() == [], 10, "the agent gone from the listing")


@pytest.fixture
def etcd_servers(etcd, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    """Two servers on a real etcd, one store and index."""
    config = ServerConfig(registry=etcd.url, store=str(tmp_path / "store"), ttl=2.0)
    servers: list[Server] = []
    try:
        servers.extend(Server(config).start() for _ in range(2))
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop(0)


def _in_flight(client: RemoteClient) -> list[str]:
    return [job.evaluation_id for job in client.list_evaluations().in_flight]


def _client(server: Server) -> RemoteClient:
    return RemoteClient(f"127.0.0.1:{server.port}")


def test_a_servers_own_jobs_are_listed_as_it_writes_them(etcd_servers) -> None:
    """This server's jobs reach its listing as they are written, not when the watch brings
    them back: with its watch stopped, a job it starts is listed at once, one it finishes is
    gone at once."""
    first, _ = etcd_servers
    first.in_flight.close()  # nothing from etcd from now on
    jobs = first.dispatcher.jobs
    with _client(first) as client:
        assert _in_flight(client) == []
        job = jobs.start("a" * 32, "digits_cnn", agent_id="agent-1", attempt=1)
        assert _in_flight(client) == ["a" * 32]
        jobs.running(job, "agent-2", 2)
        assert [(j.agent_id, j.attempt) for j in client.list_evaluations().in_flight] == [
            ("agent-2", 2)
        ]
        jobs.finish("a" * 32)
        assert _in_flight(client) == []


def test_another_servers_jobs_are_listed_within_the_watchs_delay(etcd_servers) -> None:
    """A job written through another server is listed once etcd's watch pushes it, and leaves
    the listing the same way; asked for by id, it is read from etcd at once (a client following
    its evaluation through this server), whatever the watch."""
    first, second = etcd_servers
    with _client(first) as client:
        began = time.monotonic()
        second.dispatcher.jobs.start("b" * 32, "digits_cnn", agent_id="agent-1", attempt=1)
        wait_for(lambda: _in_flight(client) == ["b" * 32], 5, "the other server's job listed")
        print(f"listed {1000 * (time.monotonic() - began):.1f} ms after it was written")
        second.dispatcher.jobs.finish("b" * 32)
        wait_for(lambda: _in_flight(client) == [], 5, "the other server's job gone")
        first.in_flight.close()
        second.dispatcher.jobs.start("c" * 32, "digits_cnn", agent_id="agent-1", attempt=1)
        with pytest.raises(EvaluationInFlight, match=f"evaluation {'c' * 32} of digits_cnn"):
            client.get_evaluation("c" * 12)
        assert _in_flight(client) == []  # the watch stopped: the listing does not see it


def test_an_evaluation_followed_by_id_while_etcd_is_away_is_as_last_seen(
    etcd_servers, running_etcd
) -> None:
    """A client following its evaluation by id while etcd restarts is answered as this server
    last saw the jobs, not refused: in flight, or (never seen in flight) not stored."""
    first, second = etcd_servers
    second.dispatcher.jobs.start("f" * 32, "digits_cnn", agent_id="agent-1", attempt=1)
    with _client(first) as client:
        wait_for(lambda: _in_flight(client) == ["f" * 32], 5, "the other server's job listed")
        running_etcd.stop()
        with pytest.raises(EvaluationInFlight, match=f"evaluation {'f' * 32} of digits_cnn"):
            client.get_evaluation("f" * 32)
        with pytest.raises(UnknownEvaluation):
            client.get_evaluation("0" * 32)


def test_listings_read_nothing_from_etcd(etcd_servers, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = etcd_servers
    second.dispatcher.jobs.start("d" * 32, "digits_cnn", agent_id="agent-1", attempt=1)
    reads: list[str] = []
    client_post = first.registry._client.post
    monkeypatch.setattr(
        first.registry._client,
        "post",
        lambda url, *a, **k: reads.append(url) or client_post(url, *a, **k),
    )
    with _client(first) as client:
        wait_for(lambda: _in_flight(client) == ["d" * 32], 5, "the other server's job listed")
        for _ in range(20):
            assert _in_flight(client) == ["d" * 32]
    assert not [url for url in reads if url.endswith("/kv/range")]


def test_a_job_whose_record_is_indexed_is_not_listed_in_flight(etcd_servers) -> None:
    """The record wins: indexed while its job is still in etcd (its server removes the job
    after indexing the record, and the watch brings the removal later), the evaluation is
    listed stored, not in flight."""
    first, second = etcd_servers
    record = real_record().model_copy(update={"id": "e" * 32})
    with _client(first) as client:
        second.dispatcher.jobs.start(record.id, "digits_cnn", agent_id="agent-1", attempt=1)
        wait_for(lambda: _in_flight(client) == [record.id], 5, "the other server's job listed")
        first.index.add([record])
        listing = client.list_evaluations()
        assert [s.id for s in listing.summaries] == [record.id] and listing.in_flight == []
        assert [s.id for s in client.list_evaluations().summaries] == [record.id]


def _flatten_model():
    """An ONNX image model of 3x2x2 inputs and 12 outputs: the smallest file AddModel takes."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["y"])],
        "flatten",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 12])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
