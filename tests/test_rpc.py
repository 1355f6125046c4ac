"""The agent's Predictor service over real gRPC on loopback (port 0), without a registry:
predict sessions, bad inputs and their status codes, message limits, health and reflection."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from mlms import errors
from mlms.agent.service import Load, PredictorService
from mlms.protos.mlms.v2 import (
    calls_pb2,
    evaluation_pb2,
    predictor_pb2,
    predictor_pb2_grpc,
    types_pb2,
)
from mlms.rpc import tensors
from mlms.rpc.options import CHANNEL_OPTIONS, MAX_MESSAGE_BYTES
from mlms.rpc.otlp import process_provider
from mlms.rpc.serving import Service, start_server
from mlms.rpc.status import error_from_rpc

SERVICE = "mlms.v2.Predictor"


class _Agent(PredictorService):
    def Info(self, request, context):
        raise RuntimeError("a bug with a secret path /etc/mlms in its message")


@pytest.fixture(scope="module")
def agent(store) -> Iterator[tuple[predictor_pb2_grpc.PredictorStub, grpc.Channel, int]]:
    service = _Agent(
        framework="torch",
        store=store,
        describe=lambda: '{"id": "test"}',
        agent_labels=lambda: {"agent_id": "test"},
        load=Load(),
        provider=process_provider("mlms-agent", None),
    )
    running = start_server(
        "127.0.0.1:0",
        [Service(SERVICE, service, predictor_pb2_grpc.add_PredictorServicer_to_server)],
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}", options=CHANNEL_OPTIONS)
    yield predictor_pb2_grpc.PredictorStub(channel), channel, running.port
    channel.close()
    running.stop(0)
    service.close_all()


def _open(stub, model: str = "digits_cnn") -> predictor_pb2.OpenResponse:
    return stub.Open(predictor_pb2.OpenRequest(spec=types_pb2.ModelSpec(model=model, hw="cpu")))


def _code(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


def test_open_predict_close_round_trip(agent) -> None:
    stub, *_ = agent
    opened = _open(stub)
    assert list(opened.input_shape) == [1, 8, 8] and opened.framework == "torch"
    batch = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    reply = stub.Predict(
        calls_pb2.PredictRequest(
            session_id=opened.session_id, tensor=tensors.to_proto(batch), top_k=3
        )
    )
    logits = tensors.from_proto(reply.logits)
    assert logits.shape == (4, 10) and reply.predict_ns > 0
    assert [list(t.indices) for t in reply.top] == np.argsort(-logits, axis=1)[:, :3].tolist()
    stub.Close(predictor_pb2.CloseRequest(session_id=opened.session_id))
    code, details = _code(
        lambda: stub.Predict(
            calls_pb2.PredictRequest(session_id=opened.session_id, tensor=reply.logits)
        )
    )
    assert code == grpc.StatusCode.NOT_FOUND and opened.session_id in details


def test_bad_inputs_get_their_status_and_one_line(agent) -> None:
    stub, *_ = agent
    code, details = _code(lambda: _open(stub, "resnet5"))
    assert code == grpc.StatusCode.NOT_FOUND and "resnet5" in details
    session = _open(stub).session_id
    garbage = types_pb2.Tensor(data=b"\x01\x02\x03", shape=[1, 1, 8, 8], dtype="float32")
    code, details = _code(
        lambda: stub.Predict(calls_pb2.PredictRequest(session_id=session, tensor=garbage))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "tensor data is 3 bytes, but shape [1, 1, 8, 8] of float32 needs 256"
    empty = tensors.to_proto(np.zeros((0, 1, 8, 8), np.float32))
    code, details = _code(
        lambda: stub.Predict(calls_pb2.PredictRequest(session_id=session, tensor=empty))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "batch size 0" in details
    wrong = tensors.to_proto(np.zeros((1, 3, 8, 8), np.float32))
    code, details = _code(
        lambda: stub.Predict(calls_pb2.PredictRequest(session_id=session, tensor=wrong))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "[batch, 1, 8, 8]" in details
    images = types_pb2.ImageBatch(images=[b"not a png"])
    code, details = _code(
        lambda: stub.Predict(calls_pb2.PredictRequest(session_id=session, images=images))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "image 0 of the batch" in details
    code, details = _code(
        lambda: list(
            stub.Evaluate(
                calls_pb2.EvaluateRequest(
                    spec=evaluation_pb2.EvaluationSpec(model="digits_cnn", batch_sizes=[0])
                )
            )
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "batch_sizes" in details
    code, details = _code(
        lambda: list(
            stub.Evaluate(
                calls_pb2.EvaluateRequest(
                    spec=evaluation_pb2.EvaluationSpec(model="digits_cnn", framework="onnxruntime")
                )
            )
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "this agent runs 'torch'" in details


def test_oversized_message_is_resource_exhausted_and_server_keeps_serving(agent) -> None:
    stub, *_ = agent
    # A channel without the send limit, so that the agent itself has to refuse the message.
    channel = grpc.insecure_channel(
        f"127.0.0.1:{agent[2]}", options=[("grpc.max_send_message_length", -1)]
    )
    big = types_pb2.Tensor(
        data=bytes(MAX_MESSAGE_BYTES + 1024), shape=[MAX_MESSAGE_BYTES // 4 + 256], dtype="float32"
    )
    with pytest.raises(grpc.RpcError) as caught:
        predictor_pb2_grpc.PredictorStub(channel).Predict(calls_pb2.PredictRequest(tensor=big))
    channel.close()
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    error = error_from_rpc(caught.value, "agent")
    assert isinstance(error, errors.InvalidArgument) and "64 MiB" in str(error)
    assert _open(stub).session_id  # still serving


def test_health_and_reflection(agent) -> None:
    _, channel, _ = agent
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE):
        status = health.Check(health_pb2.HealthCheckRequest(service=name)).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = {s.name for reply in replies for s in reply.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health"} <= names


def test_client_side_mapping_restores_the_error_class(agent) -> None:
    stub, *_ = agent
    with pytest.raises(grpc.RpcError) as caught:
        _open(stub, "resnet5")
    error = error_from_rpc(caught.value, "agent")
    assert type(error) is errors.UnknownModel and "resnet5" in str(error)
    refused = grpc.insecure_channel("127.0.0.1:1")
    with pytest.raises(grpc.RpcError) as caught:
        predictor_pb2_grpc.PredictorStub(refused).Info(predictor_pb2.InfoRequest(), timeout=5)
    error = error_from_rpc(caught.value, "agent at 127.0.0.1:1")
    assert isinstance(error, errors.Unavailable)
    assert str(error).startswith("cannot reach agent at 127.0.0.1:1: ")
    assert "\n" not in str(error)


def test_unexpected_errors_are_internal_with_a_generic_message(agent) -> None:
    stub, *_ = agent
    code, details = _code(lambda: stub.Info(predictor_pb2.InfoRequest()))
    assert code == grpc.StatusCode.INTERNAL
    assert details == (
        "internal error in /mlms.v2.Predictor/Info (RuntimeError); the details are in the "
        "server log"
    )


@pytest.mark.parametrize(
    ("method", "expected", "streaming"),
    [
        ("/mlms.v2.Predictor/Predict", "mlms.v2.PredictRequest", False),
        ("/mlms.v2.Predictor/Evaluate", "mlms.v2.EvaluateRequest", True),
        ("/grpc.health.v1.Health/Check", "grpc.health.v1.HealthCheckRequest", False),
    ],
)
def test_undecodable_bytes_are_invalid_argument_with_one_log_line(
    agent, caplog, method: str, expected: str, streaming: bool
) -> None:
    _, channel, _ = agent
    garbage = b"\xff\xff\xff"  # a field number of zero: no protobuf message parses it
    with caplog.at_level("INFO"), pytest.raises(grpc.RpcError) as caught:
        if streaming:
            list(channel.unary_stream(method)(garbage, timeout=10))
        else:
            channel.unary_unary(method)(garbage, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        f"request to {method} does not parse: expected a serialized {expected}, got 3 bytes "
        "(wire format was corrupt)"
    )
    assert isinstance(error_from_rpc(caught.value, "agent"), errors.InvalidArgument)
    logged = [r for r in caplog.records if method in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is None
    assert not [r for r in caplog.records if r.name.startswith("grpc")]
