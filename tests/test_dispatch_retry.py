"""The server's predict path when agents fail: a predict that meets an agent which lost its
session (it restarted) is sent again, in a fresh session, with the caller's trace; when no
agent is left, the error names what happened to each one tried.

Real parts: the torch agent's Predictor service behind a gRPC server, an in-memory registry,
the server's fleet, jobs, channels and dispatcher. The server interceptor that records each
call's metadata is the test's window onto the wire."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from mlms.agent.process import SERVICE_NAME, Agent, AgentConfig
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.errors import Unavailable
from mlms.protos.mlms.v2 import calls_pb2, predictor_pb2, predictor_pb2_grpc, types_pb2
from mlms.registry.agents import register_agent
from mlms.registry.memory import MemoryRegistry
from mlms.rpc import tensors
from mlms.rpc.serving import RunningServer, Service, start_server
from mlms.server.agents import AgentChannels
from mlms.server.dispatch import Dispatcher
from mlms.server.fleet import Fleet
from mlms.server.jobs import Jobs
from tests.processes import free_port, wait_for

SPEC = types_pb2.ModelSpec(model="digits_cnn", framework="torch", hw="cpu")


class Recorder(grpc.ServerInterceptor):
    """Each call's method and metadata, in arrival order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    def intercept_service(self, continuation, handler_call_details):
        metadata = dict(handler_call_details.invocation_metadata or ())
        self.calls.append((handler_call_details.method.rsplit("/", 1)[-1], metadata))
        return continuation(handler_call_details)


@dataclass
class Served:
    agent: Agent
    server: RunningServer
    address: str
    recorder: Recorder


def _dispatcher(registry: MemoryRegistry) -> Dispatcher:
    fleet = Fleet(registry)
    wait_for(lambda: fleet.agents(), 30, "the fleet to see the agent")
    return Dispatcher(fleet, Jobs(registry, registry.lease(30), "test-server"), AgentChannels())


def _parent(trace_id: int) -> object:
    span = SpanContext(trace_id, 0x1234, is_remote=False, trace_flags=TraceFlags(1))
    return trace.set_span_in_context(NonRecordingSpan(span))


def _request() -> calls_pb2.PredictRequest:
    batch = np.zeros((1, 1, 8, 8), np.float32)
    return calls_pb2.PredictRequest(spec=SPEC, tensor=tensors.to_proto(batch))


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    agent = Agent(AgentConfig(framework="torch"))
    # Built now, not within the first Open's deadline (a cold build trains the network).
    AssetManager(agent.store, mlms_home() / "cache").ensure(get_model("digits_cnn"), "torch")
    recorder = Recorder()
    service = Service(
        SERVICE_NAME, agent.service, predictor_pb2_grpc.add_PredictorServicer_to_server
    )
    server = start_server("127.0.0.1:0", [service], interceptors=[recorder])
    try:
        yield Served(agent, server, f"127.0.0.1:{server.port}", recorder)
    finally:
        server.stop(0)


def test_a_predict_after_a_lost_session_keeps_the_callers_trace(served: Served) -> None:
    registry = MemoryRegistry()
    record = served.agent.record().model_copy(update={"address": served.address})
    registration = register_agent(registry, record, ttl=30)
    dispatcher = _dispatcher(registry)
    try:
        first = dispatcher.predict(_request(), _parent(0xA1))
        assert first.logits.shape == [1, 10]
        # The agent forgets every session, as a restarted one would.
        stub = predictor_pb2_grpc.PredictorStub(grpc.insecure_channel(served.address))
        for session in list(dispatcher._sessions.values()):
            stub.Close(predictor_pb2.CloseRequest(session_id=session), timeout=30)
        served.recorder.calls.clear()
        again = dispatcher.predict(_request(), _parent(0xB2))
        assert again.logits.shape == [1, 10]
    finally:
        registration.close()
    methods = [method for method, _ in served.recorder.calls]
    assert methods == ["Predict", "Open", "Predict"]  # NOT_FOUND, a fresh session, the retry
    for method, metadata in served.recorder.calls:
        if method == "Predict":
            assert f"{0xB2:032x}" in metadata.get("traceparent", ""), (method, metadata)


def test_the_final_error_names_every_agent_tried_and_why(served: Served) -> None:
    registry = MemoryRegistry()
    dead = served.agent.record().model_copy(
        update={"agent_id": "gone-agent", "address": f"127.0.0.1:{free_port()}"}
    )
    registration = register_agent(registry, dead, ttl=30)
    dispatcher = _dispatcher(registry)
    try:
        with pytest.raises(Unavailable) as caught:
            dispatcher.predict(_request(), _parent(0xC3))
    finally:
        registration.close()
    message = str(caught.value)
    assert "predict failed on agent gone-agent at 127.0.0.1:" in message, message
    assert "UNAVAILABLE" in message and "\n" not in message
