"""``mlms bound`` through the fleet, like an evaluation: a real etcd, S3 over HTTP (moto's
server), one ``mlms server`` and one torch ``mlms agent`` on loopback. The client's ``Bound``
goes to the server, which picks the agent, keeps a job in etcd and streams the agent's
progress and record back; the record is stored next to the evaluations."""

from __future__ import annotations

import re
from collections.abc import Iterator

import grpc
import pytest

from mlms.bounds.record import BoundRequest
from mlms.evaluation.progress import Progress
from mlms.protos.mlms.v2 import (
    bound_pb2,
    calls_pb2,
    evaluator_pb2_grpc,
    predictor_pb2_grpc,
    types_pb2,
)
from mlms.registry.factory import registry_from_url
from mlms.registry.memory import MemoryRegistry
from mlms.remote_client import RemoteClient
from mlms.server import jobs
from mlms.store.factory import store_from_url
from tests.loopback_fleet import LoopbackFleet, running_fleet
from tests.processes import wait_for

#: Seconds for one gRPC call of these tests; a tiny bound finishes in a few.
CALL_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def fleet(etcd, s3, store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackFleet]:
    root = tmp_path_factory.mktemp("bound_fleet")
    with running_fleet(etcd, s3, root, ["torch"], ["digits_cnn"], assets_from=store) as fleet:
        yield fleet


def _agent(fleet: LoopbackFleet) -> str:
    (address,) = fleet.agents
    return address


def test_a_bound_runs_on_an_agent_and_is_stored(fleet: LoopbackFleet) -> None:
    request = BoundRequest(
        model="digits_cnn", hw="cpu", batch_sizes=[1], repeats=3, iterations=3, min_seconds=0
    )
    progress: list[Progress] = []
    with RemoteClient(fleet.address) as client:
        record = client.bound(request, progress.append)
        listed = client.list_bounds()
        evaluation = client.get_evaluation(record.batches[0].evaluation_id)
    assert re.fullmatch(r"[0-9a-f]{32}", record.id), fleet.logs()
    assert record.request == request.model_copy(update={"framework": "torch"})
    assert record.model == "digits_cnn" and record.framework == "torch"
    assert record.device == "cpu"
    [batch] = record.batches
    assert batch.batch_size == 1 and batch.sequential_ms > 0 and batch.measured_ms > 0
    assert batch.layers and any(layer.bound_ms > 0 for layer in batch.layers)
    assert {"conv", "gemm"} <= {layer.kind for layer in batch.layers}
    # The evaluation the bound is set against ran on the agent, and reported its progress.
    assert evaluation.agent["mode"] == "remote" and evaluation.agent["address"] == _agent(fleet)
    assert progress and progress[-1].done == progress[-1].target
    # Stored in the fleet's store, listed by the server, and no job left in etcd.
    assert [b.id for b in listed] == [record.id]
    assert listed[0] == record
    assert store_from_url(fleet.store_url).exists(f"bounds/{record.id}.json")
    registry = registry_from_url(fleet.registry_url)
    try:  # the server removes the job once the record's stream has ended, so just after it
        wait_for(lambda: not registry.get_prefix("jobs/"), 10, "the finished job's removal")
    finally:
        registry.close()


def test_bad_bound_requests_over_grpc(fleet: LoopbackFleet) -> None:
    def status(call) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as caught:
            list(call())
        details = caught.value.details()
        assert "\n" not in details, details
        return caught.value.code(), details

    with grpc.insecure_channel(fleet.address) as channel:
        stub = evaluator_pb2_grpc.EvaluatorStub(channel)

        def bound(**fields):
            spec = bound_pb2.BoundSpec(**fields)
            return lambda: stub.Bound(calls_pb2.BoundRequest(spec=spec), timeout=CALL_TIMEOUT_S)

        code, details = status(
            bound(model="digits_cnn", precisions=types_pb2.StringList(values=["fp8"]))
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details.startswith("bad bound request: precisions: ") and "fp8" in details
        code, details = status(bound(model="digits_cnn", model_precision="fp8"))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details.startswith("bad bound request: model_precision: ") and "fp8" in details
        code, details = status(bound(model="nope"))
        assert code == grpc.StatusCode.NOT_FOUND and "unknown model 'nope'" in details
        code, details = status(bound(model="digits_cnn", repeats=1))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details.startswith("bad bound request: repeats: ")
        # Refused by the agent (a CPU has no TF32), passed on by the server as it is.
        code, details = status(
            bound(model="digits_cnn", precisions=types_pb2.StringList(values=["tf32"]))
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details.startswith("precision tf32 is not available on cpu")
    with grpc.insecure_channel(_agent(fleet)) as channel:
        agent = predictor_pb2_grpc.PredictorStub(channel)
        code, details = status(
            lambda: agent.Bound(
                calls_pb2.BoundRequest(spec=bound_pb2.BoundSpec(model="digits_cnn"), bound_id="x1"),
                timeout=CALL_TIMEOUT_S,
            )
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details == "bound id 'x1': expected 32 lowercase hex digits"


def test_a_bound_in_flight_is_not_an_evaluation() -> None:
    """A bound keeps a job in the registry like an evaluation, marked as a bound, which the
    evaluation listings leave out."""
    registry = MemoryRegistry()
    try:
        keeper = jobs.Jobs(registry, registry.lease(10.0), "server-1")
        keeper.start("a" * 32, "digits_cnn")
        bound = keeper.start("b" * 32, "digits_cnn", "bound")
        assert [j.evaluation_id for j in jobs.in_flight(registry, "evaluation")] == ["a" * 32]
        assert sorted(j.kind for j in jobs.in_flight(registry)) == ["bound", "evaluation"]
        assert jobs.find(registry, "b", "evaluation") is None
        assert bound.describe().startswith(f"bound {'b' * 32} of digits_cnn is dispatching")
    finally:
        registry.close()
