"""Backpressure: calls beyond what the server holds, and callers over their quota, are refused
RESOURCE_EXHAUSTED at once with gRPC's retry-pushback trailer; through real gRPC servers (a
call held in flight by an event, never a sleep), the token bucket on a given clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mlms import errors
from mlms.protos.mlms.v2 import evaluator_pb2, evaluator_pb2_grpc
from mlms.registry.memory import MemoryRegistry
from mlms.remote_client import RemoteClient
from mlms.security.tokens import Tokens
from mlms.server.backpressure import MIN_PUSHBACK_S, Limits, TokenBucket
from mlms.server.process import Server, ServerConfig
from mlms.store.local import LocalStore
from tests.processes import run_mlms


def test_a_token_bucket_allows_its_rate_and_one_seconds_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(2.0, clock=lambda: now[0])
    assert bucket.take() == 0 and bucket.take() == 0
    assert bucket.take() == pytest.approx(0.5)  # the next call's wait
    now[0] = 0.5
    assert bucket.take() == 0 and bucket.take() == pytest.approx(0.5)
    slow = TokenBucket(0.1, clock=lambda: now[0])
    assert slow.take() == 0 and slow.take() == pytest.approx(10.0)  # a burst of one at least


@contextmanager
def _serving(tmp_path: Path, limits: Limits, **config) -> Iterator[Server]:
    registry = MemoryRegistry()
    server = Server(
        ServerConfig(store=str(tmp_path / "store"), limits=limits, **config), registry=registry
    )
    try:
        yield server
    finally:
        server.stop(0)
        registry.close()


def _refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    return caught.value


def _pushback_s(error: grpc.RpcError) -> float:
    return int(dict(error.trailing_metadata())["grpc-retry-pushback-ms"]) / 1000


def test_calls_beyond_the_limit_are_refused_with_when_to_retry(tmp_path: Path) -> None:
    """One call held in flight at --max-calls 1: the next is refused at once with a pushback;
    health is still answered; once the call ends, calls go through again."""
    entered, release = threading.Event(), threading.Event()
    with _serving(tmp_path, Limits(max_calls=1, max_queued=0)) as server:
        answer = server.service.ListAgents

        def held(request, context):
            entered.set()
            release.wait(30)
            return answer(request, context)

        server.service.ListAgents = held  # before start: the handlers bind it then
        server.start()
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = evaluator_pb2_grpc.EvaluatorStub(channel)
            request = evaluator_pb2.ListAgentsRequest()
            with ThreadPoolExecutor(1) as pool:
                first = pool.submit(stub.ListAgents, request, timeout=30)
                assert entered.wait(30)
                refused = _refusal(lambda: stub.ListModels(evaluator_pb2.ListModelsRequest()))
                assert _pushback_s(refused) >= MIN_PUSHBACK_S
                assert refused.details().startswith(
                    "the server is refusing calls: it holds 1 calls at once and 0 waiting, its "
                    "limit; retry in "
                )
                health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
                assert health.status == health_pb2.HealthCheckResponse.SERVING
                release.set()
                assert first.result(30).agents == []
            assert stub.ListModels(evaluator_pb2.ListModelsRequest()).manifests


def test_each_token_has_its_quota(tmp_path: Path) -> None:
    """--quota for every caller, --token-quota for one token: a caller over its quota is
    refused with when its next call is allowed; the client raises Overloaded in one line."""
    tokens = Tokens(LocalStore(tmp_path / "store"))
    _, limited = tokens.create("alice", ["read"])
    _, free = tokens.create("bob", ["read"])
    limits = Limits(quota=0.01, token_quotas={"bob": 0})
    with _serving(tmp_path, limits, auth=True) as server:
        server.start()
        address = f"127.0.0.1:{server.port}"
        with (
            RemoteClient(address, token=limited) as alice,
            RemoteClient(address, token=free) as bob,
        ):
            assert alice.list_agents() == []  # a burst of one
            with pytest.raises(errors.Overloaded) as caught:
                alice.list_agents()
            assert str(caught.value).startswith(
                "caller 'alice' is over its quota of 0.01 calls a second; retry in "
            )
            assert 99 <= caught.value.retry_after <= 100
            for _ in range(5):
                assert bob.list_agents() == []


def test_bad_limits_are_one_line(tmp_path: Path) -> None:
    done = run_mlms(tmp_path, "server", "--token-quota", "alice")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "mlms: error: token quota 'alice': expected NAME=CALLS_PER_SECOND like alice=20 (0: none)"
    )
    done = run_mlms(tmp_path, "server", "--max-calls", "0")
    assert done.returncode == 2 and "Invalid value for '--max-calls'" in done.stderr


def test_a_call_waits_in_the_queue_while_there_is_room(tmp_path: Path) -> None:
    """--max-calls 1 --max-queued 1, one call held: of two more, one waits for the slot and
    is answered once the held call ends, the other is refused."""
    entered, release = threading.Event(), threading.Event()
    with _serving(tmp_path, Limits(max_calls=1, max_queued=1)) as server:
        answer = server.service.ListAgents

        def held(request, context):
            if not entered.is_set():
                entered.set()
                release.wait(30)
            return answer(request, context)

        server.service.ListAgents = held
        server.start()
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = evaluator_pb2_grpc.EvaluatorStub(channel)
            request = evaluator_pb2.ListAgentsRequest()
            with ThreadPoolExecutor(3) as pool:
                first = pool.submit(stub.ListAgents, request, timeout=30)
                assert entered.wait(30)
                more = [pool.submit(stub.ListAgents, request, timeout=30) for _ in range(2)]
                ended = as_completed(more, timeout=30)
                refused = next(f for f in ended if f.exception() is not None)
                assert refused.exception().code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                release.set()
                assert first.result(30).agents == []
                [waited] = [f for f in more if f is not refused]
                assert waited.result(30).agents == []
