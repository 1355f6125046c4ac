"""The Open Inference Protocol on agents: the servicer over real gRPC on loopback (metadata,
inference with raw and typed contents, Triton's ModelConfig and ModelStatistics, bad requests
and their statuses, trace context from the call's metadata), and Triton's own client against
a real agent process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mlms.agent.open_inference import SERVICE_NAME, OpenInferenceService, add_to_server
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.protos.inference import grpc_service_pb2 as oip
from mlms.protos.inference import grpc_service_pb2_grpc as oip_grpc
from mlms.protos.inference import model_config_pb2 as triton_config
from mlms.rpc.options import CHANNEL_OPTIONS
from mlms.rpc.serving import Service, start_server
from mlms.security.ca import issue, make_ca
from mlms.security.tls import TlsFiles
from tests.otlp_receiver import Receiver
from tests.processes import MlmsProcess, wait_for

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def channel(store, exporter) -> Iterator[grpc.Channel]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    service = OpenInferenceService(
        framework="torch",
        models=["digits_cnn", "resnet18"],
        store=store,
        provider=provider,
        agent_labels=lambda: {"agent_id": "test"},
    )
    running = start_server("127.0.0.1:0", [Service(SERVICE_NAME, service, add_to_server)])
    opened = grpc.insecure_channel(f"127.0.0.1:{running.port}", options=CHANNEL_OPTIONS)
    yield opened
    opened.close()
    running.stop(0)
    service.close()


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> oip_grpc.GRPCInferenceServiceStub:
    return oip_grpc.GRPCInferenceServiceStub(channel)


def _embedded_logits(store, batch: np.ndarray) -> np.ndarray:
    manifest = get_model("digits_cnn")
    asset = AssetManager(store, mlms_home() / "cache").ensure(manifest, "torch")
    with predictor_class("torch")(manifest, asset.path, PredictorOptions("cpu")) as predictor:
        return predictor.predict(batch)


def _batch(size: int = 3) -> np.ndarray:
    return np.random.default_rng(7).standard_normal((size, 1, 8, 8)).astype(np.float32)


def _request(batch: np.ndarray, **changes) -> oip.ModelInferRequest:
    fields = {"name": "image", "datatype": "FP32", "shape": list(batch.shape)} | changes
    return oip.ModelInferRequest(
        model_name="digits_cnn",
        id="r1",
        inputs=[oip.ModelInferRequest.InferInputTensor(**fields)],
        raw_input_contents=[batch.tobytes()],
    )


def _logits(reply: oip.ModelInferResponse) -> np.ndarray:
    output = reply.outputs[0]
    assert output.name == "logits" and output.datatype == "FP32"
    return np.frombuffer(reply.raw_output_contents[0], "<f4").reshape(list(output.shape))


def _status(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


def test_health_and_metadata(stub) -> None:
    assert stub.ServerLive(oip.ServerLiveRequest()).live
    assert stub.ServerReady(oip.ServerReadyRequest()).ready
    assert stub.ModelReady(oip.ModelReadyRequest(name="digits_cnn")).ready
    server = stub.ServerMetadata(oip.ServerMetadataRequest())
    assert server.name == "mlms" and server.version
    model = stub.ModelMetadata(oip.ModelMetadataRequest(name="digits_cnn"))
    assert model.platform == "torch" and list(model.versions) == ["1.0.0"]
    assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [
        ("image", "FP32", [-1, 1, 8, 8])
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in model.outputs] == [
        ("logits", "FP32", [-1, 10])
    ]


def test_infer_gives_the_embedded_predictors_logits(stub, store) -> None:
    batch = _batch()
    reply = stub.ModelInfer(_request(batch))
    assert reply.model_name == "digits_cnn" and reply.model_version == "1.0.0"
    assert reply.id == "r1"
    np.testing.assert_allclose(_logits(reply), _embedded_logits(store, batch), rtol=1e-5)
    typed = oip.ModelInferRequest(
        model_name="digits_cnn",
        inputs=[
            oip.ModelInferRequest.InferInputTensor(
                name="image",
                datatype="FP32",
                shape=list(batch.shape),
                contents=oip.InferTensorContents(fp32_contents=batch.ravel().tolist()),
            )
        ],
        outputs=[oip.ModelInferRequest.InferRequestedOutputTensor(name="logits")],
    )
    np.testing.assert_array_equal(_logits(stub.ModelInfer(typed)), _logits(reply))


def test_model_config_is_the_metadata_in_tritons_terms(stub) -> None:
    config = stub.ModelConfig(oip.ModelConfigRequest(name="digits_cnn")).config
    assert (config.name, config.platform, config.backend) == (
        "digits_cnn",
        "pytorch_libtorch",
        "pytorch",
    )
    assert config.max_batch_size == 4096
    fp32 = triton_config.TYPE_FP32
    # Triton's dims leave out the batch axis (max_batch_size > 0); the metadata's have -1.
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("image", fp32, [1, 8, 8])
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [("logits", fp32, [10])]
    metadata = stub.ModelMetadata(oip.ModelMetadataRequest(name="digits_cnn"))
    assert list(metadata.inputs[0].shape) == [-1, *config.input[0].dims]
    assert list(metadata.outputs[0].shape) == [-1, *config.output[0].dims]


def _statistics(stub, name: str = "digits_cnn") -> oip.ModelStatistics:
    (stats,) = stub.ModelStatistics(oip.ModelStatisticsRequest(name=name)).model_stats
    return stats


def test_model_statistics_count_the_infers(stub) -> None:
    before = _statistics(stub)
    stub.ModelInfer(_request(_batch(3)))
    stub.ModelInfer(_request(_batch(2)))
    with pytest.raises(grpc.RpcError):
        stub.ModelInfer(_request(_batch(1), datatype="INT64"))
    with pytest.raises(grpc.RpcError):  # no model of ours: no model's statistics count it
        stub.ModelInfer(oip.ModelInferRequest(model_name="resnet5"))
    after = _statistics(stub)
    assert (after.name, after.version) == ("digits_cnn", "1.0.0")
    assert after.inference_count - before.inference_count == 5  # samples
    assert after.execution_count - before.execution_count == 2  # calls
    stats, was = after.inference_stats, before.inference_stats
    assert stats.success.count - was.success.count == 2
    assert stats.fail.count - was.fail.count == 1
    assert stats.success.ns > was.success.ns and stats.fail.ns > was.fail.ns
    for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert getattr(stats, phase).count - getattr(was, phase).count == 2, phase
    # The phases are parts of the calls' durations.
    assert stats.compute_infer.ns < stats.success.ns
    sizes = {batch.batch_size: batch.compute_infer.count for batch in after.batch_stats}
    assert sizes[3] >= 1 and sizes[2] >= 1
    assert after.last_inference > 1.7e12  # milliseconds since the epoch
    every = stub.ModelStatistics(oip.ModelStatisticsRequest()).model_stats
    assert [model.name for model in every] == ["digits_cnn", "resnet18"]
    assert every[1].execution_count == 0


def test_tritons_other_extensions_are_unimplemented(channel) -> None:
    for method in ("RepositoryIndex", "SystemSharedMemoryStatus", "CudaSharedMemoryRegister"):
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
        code, details = _status(lambda call=call: call(b"", timeout=10))
        assert code == grpc.StatusCode.UNIMPLEMENTED
        assert details.startswith(f"{method} is a Triton extension that mlms agents do not serve")
        assert "ModelConfig, ModelStatistics" in details
    stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
    code, details = _status(lambda: list(stream(iter([b""]), timeout=10)))
    assert code == grpc.StatusCode.UNIMPLEMENTED and details.startswith("ModelStreamInfer ")


def test_infer_joins_the_callers_trace(stub, exporter) -> None:
    exporter.clear()
    stub.ModelInfer(_request(_batch(1)), metadata=[("traceparent", TRACEPARENT)])
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "agent.infer"]
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert f"{span.parent.span_id:016x}" == PARENT_ID
    assert span.attributes["mlms.model"] == "digits_cnn"
    assert span.attributes["mlms.batch_size"] == 1 and span.attributes["mlms.predict_ns"] > 0


def test_repository_load_and_unload(stub) -> None:
    stub.RepositoryModelLoad(oip.RepositoryModelLoadRequest(model_name="digits_cnn"))
    stub.RepositoryModelUnload(oip.RepositoryModelUnloadRequest(model_name="digits_cnn"))
    assert _logits(stub.ModelInfer(_request(_batch(2)))).shape == (2, 10)  # loads it again


def test_repository_calls_still_speak_kserves_messages(channel) -> None:
    """KServe's load and unload messages differ from Triton's: the request's model_name is
    field 1 (Triton's repository_name), and the reply says model_name (1) and isLoaded or
    isUnloaded (2) where Triton's is empty."""
    kserve_request = b"\x0a\x0adigits_cnn"
    kserve_reply = b"\x0a\x0adigits_cnn\x10\x01"
    for method in ("RepositoryModelLoad", "RepositoryModelUnload"):
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
        assert call(kserve_request, timeout=60) == kserve_reply
    unknown = channel.unary_unary("/inference.GRPCInferenceService/RepositoryModelLoad")
    code, details = _status(lambda: unknown(b"\x0a\x07resnet5", timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND and details.startswith("model 'resnet5'")


def test_bad_requests_get_their_status_and_one_line(stub) -> None:
    batch = _batch(1)
    not_found = grpc.StatusCode.NOT_FOUND
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    cases = [
        (
            lambda: stub.ModelMetadata(oip.ModelMetadataRequest(name="resnet5")),
            not_found,
            "model 'resnet5' is not served by this torch agent: expected one of digits_cnn, "
            "resnet18",
        ),
        (
            lambda: stub.ModelReady(oip.ModelReadyRequest(name="digits_cnn", version="2")),
            not_found,
            "model 'digits_cnn' version '2': this agent serves version '1.0.0' (or leave the "
            "version empty)",
        ),
        (
            lambda: stub.ModelInfer(_request(batch, datatype="INT64")),
            invalid,
            "input 'image' datatype 'INT64': model 'digits_cnn' expects 'FP32'",
        ),
        (
            lambda: stub.ModelInfer(_request(batch, shape=[1, 3, 8, 8])),
            invalid,
            "input 'image' shape [1, 3, 8, 8]: model 'digits_cnn' expects [-1, 1, 8, 8] with "
            "a batch of 1 or more",
        ),
        (
            lambda: stub.ModelInfer(_request(batch, shape=[0, 1, 8, 8])),
            invalid,
            "input 'image' shape [0, 1, 8, 8]: model 'digits_cnn' expects [-1, 1, 8, 8] with "
            "a batch of 1 or more",
        ),
        (
            lambda: stub.ModelInfer(_request(batch, shape=[2**62, 1, 8, 8])),
            invalid,
            f"input 'image' raw contents are 256 bytes, but shape [{2**62}, 1, 8, 8] of FP32 "
            f"needs {2**62 * 256}",
        ),
        (
            lambda: stub.ModelInfer(_request(batch, name="pixels")),
            invalid,
            "input 'pixels': model 'digits_cnn' takes input 'image'",
        ),
        (
            lambda: stub.ModelInfer(
                oip.ModelInferRequest(model_name="digits_cnn", inputs=_request(batch).inputs)
            ),
            invalid,
            "input 'image' has 0 values in contents.fp32_contents, but shape [1, 1, 8, 8] needs 64",
        ),
        (
            lambda: stub.ModelInfer(oip.ModelInferRequest(model_name="digits_cnn")),
            invalid,
            "0 inputs: model 'digits_cnn' takes 1 ('image')",
        ),
    ]
    cases += [
        (
            lambda: stub.ModelConfig(oip.ModelConfigRequest(name="resnet5")),
            not_found,
            "model 'resnet5' is not served by this torch agent: expected one of digits_cnn, "
            "resnet18",
        ),
        (
            lambda: stub.ModelStatistics(
                oip.ModelStatisticsRequest(name="digits_cnn", version="7")
            ),
            not_found,
            "model 'digits_cnn' version '7': this agent serves version '1.0.0' (or leave the "
            "version empty)",
        ),
        (
            lambda: stub.ModelStatistics(oip.ModelStatisticsRequest(version="1.0.0")),
            invalid,
            "version '1.0.0' without a model name: name the model, or leave both empty for "
            "every model",
        ),
    ]
    wrong_output = _request(batch)
    wrong_output.outputs.add(name="probabilities")
    cases.append(
        (
            lambda: stub.ModelInfer(wrong_output),
            invalid,
            "output 'probabilities': model 'digits_cnn' has output 'logits'",
        )
    )
    for call, code, message in cases:
        assert _status(call) == (code, message)


def test_garbage_bytes_are_invalid_argument_not_internal(channel) -> None:
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    code, details = _status(lambda: call(b"\xff\xff\xff", timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "expected a serialized inference.ModelInferRequest" in details


#: Statuses a bad request must never get: they say the agent broke, not the request.
BROKEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
_DIMENSIONS = st.one_of(st.integers(-3, 10), st.integers(-(2**63), 2**63 - 1))
_TENSORS = st.builds(
    oip.ModelInferRequest.InferInputTensor,
    name=st.sampled_from(["image", "pixels", ""]),
    datatype=st.sampled_from(["FP32", "FP16", "INT64", "UINT8", "BYTES", "fp32", ""]),
    shape=st.one_of(
        st.lists(_DIMENSIONS, max_size=6),
        st.tuples(st.integers(-2, 3), st.just(1), st.just(8), st.just(8)).map(list),
    ),
    contents=st.builds(
        oip.InferTensorContents,
        fp32_contents=st.lists(st.floats(width=32), max_size=130),
        int64_contents=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=70),
    ),
)
_INFER = st.builds(
    oip.ModelInferRequest,
    model_name=st.sampled_from(["digits_cnn", "resnet5", "", "../digits_cnn"]),
    model_version=st.sampled_from(["", "1.0.0", "2", "\x00"]),
    inputs=st.lists(_TENSORS, max_size=2),
    outputs=st.lists(
        st.builds(
            oip.ModelInferRequest.InferRequestedOutputTensor,
            name=st.sampled_from(["logits", "x"]),
        ),
        max_size=2,
    ),
    raw_input_contents=st.lists(
        st.one_of(st.binary(max_size=300), st.just(bytes(256)), st.just(bytes(768))),
        max_size=2,
    ),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(request=_INFER)
def test_fuzzed_infer_requests_never_break_the_agent(stub, request) -> None:
    try:
        reply = stub.ModelInfer(request, timeout=30)
    except grpc.RpcError as exc:
        assert exc.code() not in BROKEN, exc.details()
        assert "\n" not in exc.details()
    else:
        assert reply.outputs[0].shape[1] == 10


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    method=st.sampled_from(
        [
            "ModelInfer",
            "ModelMetadata",
            "ModelReady",
            "ModelConfig",
            "ModelStatistics",
            "RepositoryModelLoad",
            "ServerLive",
        ]
    ),
    body=st.binary(max_size=200),
)
def test_garbage_to_any_method_never_breaks_the_agent(channel, method, body) -> None:
    call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
    try:
        call(body, timeout=30)
    except grpc.RpcError as exc:
        assert exc.code() not in BROKEN, exc.details()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.stop()


@pytest.fixture
def agent_process(tmp_path: Path, receiver: Receiver) -> Iterator[tuple[str, MlmsProcess]]:
    process = MlmsProcess.serving(
        ["agent", "--framework", "torch", "--grace", "1", "--otlp-endpoint", receiver.endpoint],
        tmp_path / "agent.log",
    )
    try:
        address = process.address()
    except AssertionError:
        process.stop()
        raise
    channel = grpc.insecure_channel(address)
    health = health_pb2_grpc.HealthStub(channel)

    def serving() -> bool:
        assert process.alive(), process.output()
        try:
            reply = health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=2)
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    try:
        wait_for(serving, 120, f"the agent's {SERVICE_NAME} at {address}")
        yield address, process
    finally:
        channel.close()
        process.stop()


def test_tritonclient_drives_a_real_agent(
    agent_process, receiver: Receiver, store, tmp_path: Path
) -> None:
    address, process = agent_process
    batch = _batch(4)
    np.save(tmp_path / "input.npy", batch)
    result = subprocess.run(
        [
            *(sys.executable, str(ROOT / "tests" / "triton_client.py"), address, "digits_cnn"),
            *(str(tmp_path / "input.npy"), str(tmp_path / "output.npy"), TRACEPARENT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{result.stderr}\n{process.output()}"
    report = json.loads(result.stdout)
    assert report["live"] and report["ready"] and report["model_ready"]
    assert report["server"]["name"] == "mlms"
    assert report["model"]["inputs"] == [
        {"name": "image", "datatype": "FP32", "shape": ["-1", "1", "8", "8"]}
    ]
    np.testing.assert_allclose(
        np.load(tmp_path / "output.npy"), _embedded_logits(store, batch), rtol=1e-5
    )
    assert report["unknown_model"]["status"] == "StatusCode.NOT_FOUND"
    assert "'resnet5' is not served by this torch agent" in report["unknown_model"]["message"]
    assert report["wrong_datatype"] == {
        "status": "StatusCode.INVALID_ARGUMENT",
        "message": "input 'image' datatype 'INT64': model 'digits_cnn' expects 'FP32'",
    }
    assert report["wrong_shape"]["status"] == "StatusCode.INVALID_ARGUMENT"
    # Triton's extensions, as perf_analyzer starts with them: the configuration says what the
    # metadata says (dims without the batch axis), the statistics count this client's infers.
    config = report["config"]["config"]
    assert (config["name"], config["platform"]) == ("digits_cnn", "pytorch_libtorch")
    assert config["max_batch_size"] == 4096
    shapes = {t["name"]: t["shape"] for t in report["model"]["inputs"] + report["model"]["outputs"]}
    datatypes = {
        t["name"]: t["datatype"] for t in report["model"]["inputs"] + report["model"]["outputs"]
    }
    for tensor in config["input"] + config["output"]:
        assert ["-1", *tensor["dims"]] == shapes[tensor["name"]]
        assert tensor["data_type"] == f"TYPE_{datatypes[tensor['name']]}"
    assert [t["name"] for t in config["input"] + config["output"]] == ["image", "logits"]
    assert report["unknown_config"]["status"] == "StatusCode.NOT_FOUND"
    assert report["shared_memory"]["status"] == "StatusCode.UNIMPLEMENTED"
    (stats,) = report["statistics"]["model_stats"]
    assert (stats["name"], stats["version"]) == ("digits_cnn", "1.0.0")
    assert (stats["inference_count"], stats["execution_count"]) == ("4", "1")
    assert stats["inference_stats"]["success"]["count"] == "1"
    assert stats["inference_stats"]["fail"]["count"] == "2"  # the wrong datatype and shape
    assert int(stats["inference_stats"]["compute_infer"]["ns"]) > 0
    # The agent's span of the infer joined the trace that tritonclient's header named.
    (span,) = wait_for(
        lambda: [s for s in receiver.of_trace(TRACE_ID) if s.name == "agent.infer"],
        30,
        "the agent's infer span at the OTLP receiver",
    )
    assert span.parent_id == PARENT_ID and span.attributes["mlms.batch_size"] == 4


def _tls_files(folder: Path, ca, role: str | None) -> TlsFiles:
    """Files trusting ``ca``, with a certificate for ``role`` when given."""
    folder.mkdir()
    (folder / "ca.pem").write_bytes(ca.cert)
    if role is None:
        return TlsFiles.load(str(folder / "ca.pem"))
    pem = issue(ca, role, ["127.0.0.1", "localhost"])
    (folder / "cert.pem").write_bytes(pem.cert)
    (folder / "key.pem").write_bytes(pem.key)
    return TlsFiles.load(*(str(folder / name) for name in ("ca.pem", "cert.pem", "key.pem")))


def test_the_protocol_shares_the_agents_tls_and_certificate_checks(tmp_path: Path) -> None:
    from mlms.agent.process import Agent, AgentConfig

    ca = make_ca()
    agent = Agent(
        AgentConfig(framework="torch", tls=_tls_files(tmp_path / "agent", ca, "agent"))
    ).start()
    address = f"127.0.0.1:{agent.server.port}"

    def live(credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
        channel = (
            grpc.insecure_channel(address)
            if credentials is None
            else grpc.secure_channel(address, credentials)
        )
        try:
            oip_grpc.GRPCInferenceServiceStub(channel).ServerLive(
                oip.ServerLiveRequest(), timeout=10
            )
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()
        finally:
            channel.close()

    try:
        assert live(None) == grpc.StatusCode.UNAVAILABLE  # plaintext to a TLS port
        files = {
            role: _tls_files(tmp_path / str(role), ca, role) for role in (None, "client", "server")
        }
        assert live(files[None].channel_credentials()) == grpc.StatusCode.UNAVAILABLE
        assert live(files["client"].channel_credentials()) == grpc.StatusCode.PERMISSION_DENIED
        assert live(files["server"].channel_credentials()) == grpc.StatusCode.OK
    finally:
        agent.stop(0)
