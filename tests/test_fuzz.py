"""Property-based fuzzing (hypothesis) of every RPC of both services, of model manifests and of
evaluation and bound requests.

The fleet is one ``mlms server`` and one torch ``mlms agent`` (digits_cnn), both in this process
on loopback with an in-memory registry and the session's local store, so that one audit hook
sees every file either of them opens. Every call goes over real gRPC as raw bytes (identity
serializers): malformed bytes, protobuf wire records of random fields and types, mutated valid
messages, and typed messages whose fields are wrong types, huge or negative numbers, path-like
ids (``../../etc/passwd``, absolute paths, NUL bytes) and oversized messages.

What every case must show:
- a status that is not INTERNAL, UNKNOWN or DEADLINE_EXCEEDED, with a one-line message (a bad
  request is the caller's fault and says so; only OK, INVALID_ARGUMENT, NOT_FOUND,
  FAILED_PRECONDITION, RESOURCE_EXHAUSTED and, for a server with no agent for the work,
  UNAVAILABLE are expected);
- an answer within the call's deadline (``DEADLINE_S``; the slowest is asserted too).

What each test checks after its cases (the ``guard`` fixture):
- both servers still answer the gRPC health check with SERVING, the agent has nothing in flight
  and the registry holds no job;
- nothing outside the store was read or written. A ``sys.addaudithook`` hook records every
  ``open`` (and directory listing, removal, rename) that Python code makes while the cases run;
  each path must lie in ``$MLMS_HOME`` (store, asset cache, device locks) or in what the
  processes load code and data from (the interpreter, the virtualenv, the ``mlms`` package,
  ``/proc``, ``/sys``, ``/dev``). Path-like ids aim at a canary folder outside the store (a
  real PNG image and a real JSON record sit there, so that reading one would succeed); any
  open under it fails the test. Opens by C libraries (DuckDB, Arrow) are not audited: the ids
  they receive are checked by mlms code first, which is audited by the cases above.

Examples are derandomized (the same cases on every run, so that a CI failure reproduces) and
``deadline=None``: the deadline that matters is the gRPC one, asserted per call.
``MLMS_FUZZ_SCALE`` multiplies the number of cases (e.g. 10 for a longer local run).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mlms
from mlms import hardware
from mlms.agent.process import Agent, AgentConfig
from mlms.agent.service import MAX_BATCH_PIXELS, MAX_IMAGE_PIXELS
from mlms.assets.manager import AssetManager
from mlms.catalog.library_models import library_manifests
from mlms.catalog.zoo import BUILTIN_DIR, LABELS_DIR, get_model
from mlms.config import mlms_home
from mlms.datasets.index import parse_reference
from mlms.errors import InvalidArgument, ManifestError, MlmsError
from mlms.evaluation.record import (
    MAX_BATCH_SIZE,
    MAX_BATCH_SIZES,
    MAX_ITERATIONS,
    MAX_SECONDS,
    MAX_THREADS,
    MAX_WARMUP,
    EvaluationRecord,
    EvaluationRequest,
)
from mlms.evaluation.runner import leveled_runs
from mlms.evaluation.sweep import SweepSpec
from mlms.manifest import MAX_SAMPLE_VALUES, UrlSource, load_manifest
from mlms.protos.mlms.v2 import (
    advice_pb2,
    bound_pb2,
    calls_pb2,
    evaluation_pb2,
    evaluator_pb2,
    predictor_pb2,
    sweep_pb2,
    types_pb2,
)
from mlms.registry.memory import MemoryRegistry
from mlms.rpc import tensors
from mlms.rpc.convert import from_proto
from mlms.rpc.options import MAX_MESSAGE_BYTES
from mlms.rpc.payloads import bound_request, evaluation_request
from mlms.server import jobs
from mlms.server.process import Server, ServerConfig
from tests.processes import wait_for

# PIL warns about the decompression bombs these tests send on purpose (the agent refuses them).
pytestmark = pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")

SCALE = float(os.environ.get("MLMS_FUZZ_SCALE", "1"))
#: Every call's deadline; the cheap ones answer in milliseconds, a valid evaluation in seconds.
DEADLINE_S = 30.0
BAD_CODES = {
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}

EVALUATOR = "/mlms.v2.Evaluator/"
PREDICTOR = "/mlms.v2.Predictor/"
#: method -> (request message class, server-streaming); every method of both services.
SERVER_METHODS = {
    "Evaluate": (calls_pb2.EvaluateRequest, True),
    "Bound": (calls_pb2.BoundRequest, True),
    "Predict": (calls_pb2.PredictRequest, False),
    "ListAgents": (evaluator_pb2.ListAgentsRequest, False),
    "ListModels": (evaluator_pb2.ListModelsRequest, False),
    "GetEvaluation": (evaluator_pb2.GetEvaluationRequest, False),
    "ListEvaluations": (evaluator_pb2.ListEvaluationsRequest, False),
    "ListBounds": (evaluator_pb2.ListBoundsRequest, False),
    "Advise": (advice_pb2.AdviseRequest, True),
    "ListAdvice": (advice_pb2.ListAdviceRequest, False),
    "GetSpans": (evaluator_pb2.GetSpansRequest, True),
    "Analyze": (evaluator_pb2.AnalyzeRequest, True),
    "Sweep": (sweep_pb2.SweepRequest, True),
    "ViewEvaluations": (evaluator_pb2.ViewEvaluationsRequest, False),
    "AddModel": (evaluator_pb2.ModelUpload, False),
    "RemoveModel": (evaluator_pb2.RemoveModelRequest, False),
}
#: Methods that take a stream of requests: the fuzzers send one message as the whole stream.
CLIENT_STREAMING = frozenset({"AddModel"})
AGENT_METHODS = {
    "Info": (predictor_pb2.InfoRequest, False),
    "Open": (predictor_pb2.OpenRequest, False),
    "Predict": (calls_pb2.PredictRequest, False),
    "Close": (predictor_pb2.CloseRequest, False),
    "Evaluate": (calls_pb2.EvaluateRequest, True),
    "Bound": (calls_pb2.BoundRequest, True),
}


def test_every_method_is_fuzzed() -> None:
    """The tables above name every method the two services have (a new one gets fuzzed)."""
    services = {
        EVALUATOR: evaluator_pb2.DESCRIPTOR.services_by_name["Evaluator"],
        PREDICTOR: predictor_pb2.DESCRIPTOR.services_by_name["Predictor"],
    }
    for prefix, table in ((EVALUATOR, SERVER_METHODS), (PREDICTOR, AGENT_METHODS)):
        methods = services[prefix].methods
        assert {m.name for m in methods} == set(table)
        for m in methods:
            message, streaming = table[m.name]
            assert m.input_type.full_name == message.DESCRIPTOR.full_name
            assert m.server_streaming == streaming
            assert m.client_streaming == (m.name in CLIENT_STREAMING)


# -- what the processes touch -------------------------------------------------------------------


AUDITED = frozenset(
    {
        "open",
        "os.listdir",
        "os.scandir",
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.mkdir",
        "os.truncate",
        "os.chmod",
        "os.symlink",
        "shutil.rmtree",
    }
)


class FileAudit:
    """Paths that Python code on the servers' threads opens, lists or changes while
    ``recording``; installed once per process (an audit hook cannot be removed), costing one
    flag test per event otherwise."""

    _installed: FileAudit | None = None

    def __init__(self) -> None:
        self.recording = False
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    @classmethod
    def get(cls) -> FileAudit:
        if cls._installed is None:
            audit = cls()
            sys.addaudithook(audit._hook)
            cls._installed = audit
        return cls._installed

    def _hook(self, event: str, args: tuple) -> None:
        if not self.recording or event not in AUDITED or not args:
            return
        if threading.current_thread() is threading.main_thread():
            return  # the test itself (hypothesis keeps a cache); the servers run on others
        path = args[0]
        if isinstance(path, int):  # an already open descriptor
            return
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        with self._lock:
            self.seen.append((event, str(path)))

    def take(self) -> list[tuple[str, str]]:
        with self._lock:
            seen, self.seen = self.seen, []
        return seen


def _allowed_roots() -> tuple[str, ...]:
    roots = {
        str(mlms_home().resolve()),
        # The store's model assets, where the test run shares them between its workers.
        str((mlms_home() / "store" / "models").resolve()),
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        str(Path(mlms.__file__).resolve().parent),
        "/proc/",
        "/sys/",
        "/dev/",
    }
    return tuple(roots)


def outside_the_store(seen: list[tuple[str, str]], canary: Path) -> list[tuple[str, str]]:
    roots = _allowed_roots()
    bad = []
    for event, path in seen:
        if path in sys.path:  # the import system lists and probes its path entries
            continue
        resolved = os.path.realpath(path.replace("\0", "")) if path else path
        if str(canary) in resolved or "\0" in path or not resolved.startswith(roots):
            bad.append((event, path))
    return bad


# -- the fleet ----------------------------------------------------------------------------------


@dataclass
class Call:
    code: grpc.StatusCode
    details: str
    replies: list[bytes]
    seconds: float


@dataclass(repr=False)
class Fleet:
    server: Server
    agent: Agent
    registry: MemoryRegistry
    server_channel: grpc.Channel
    agent_channel: grpc.Channel
    canary: Path
    session_id: str  # an open predict session on the agent (digits_cnn)
    audit: FileAudit
    codes: Counter = field(default_factory=Counter)
    slowest: float = 0.0

    def __repr__(self) -> str:  # hypothesis prints it with every failing case
        return f"Fleet(server :{self.server.port}, agent :{self.agent.server.port})"

    def call(self, service: str, method: str, data: bytes) -> Call:
        """``method`` of the server's (``EVALUATOR``) or the agent's (``PREDICTOR``) service
        with ``data`` as the request bytes; the status, replies and time it took."""
        table = SERVER_METHODS if service == EVALUATOR else AGENT_METHODS
        channel = self.server_channel if service == EVALUATOR else self.agent_channel
        call = invoke(channel, service + method, table[method][1], data)
        self.codes[call.code] += 1
        self.slowest = max(self.slowest, call.seconds)
        return call

    def healthy(self) -> bool:
        for channel in (self.server_channel, self.agent_channel):
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10
            )
            if reply.status != health_pb2.HealthCheckResponse.SERVING:
                return False
        return True


def invoke(channel: grpc.Channel, path: str, streaming: bool, data: bytes) -> Call:
    start = time.monotonic()
    replies: list[bytes] = []
    try:
        if path.rpartition("/")[2] in CLIENT_STREAMING:
            replies.append(channel.stream_unary(path)(iter([data]), timeout=DEADLINE_S))
        elif streaming:
            replies.extend(channel.unary_stream(path)(data, timeout=DEADLINE_S))
        else:
            replies.append(channel.unary_unary(path)(data, timeout=DEADLINE_S))
        code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
    return Call(code, details, replies, time.monotonic() - start)


def checked(call: Call, method: str, *allowed: grpc.StatusCode) -> Call:
    """``call`` after asserting what every answer must be; ``allowed``: the codes this kind of
    request may get (any but the bad ones when empty)."""
    assert call.code not in BAD_CODES, f"{method}: {call.code.name}: {call.details}"
    if allowed:
        assert call.code in allowed, f"{method}: {call.code.name}: {call.details}"
    if call.code != grpc.StatusCode.OK:
        assert call.details and "\n" not in call.details, f"{method}: {call.details!r}"
        assert "Traceback" not in call.details
    assert call.seconds < DEADLINE_S
    return call


@pytest.fixture(scope="module")
def fleet(store) -> Iterator[Fleet]:
    canary = _canary(CANARY)
    # Built here so that no case pays for it (and its temporary files are not the cases').
    AssetManager(store, mlms_home() / "cache").ensure(get_model("digits_cnn"), "torch")
    # The libraries' listing (ListModels with libraries), which the process keeps, likewise:
    # importing timm imports torch._dynamo, which makes torch's cache folder in /tmp.
    library_manifests()
    registry = MemoryRegistry()
    agent = Agent(AgentConfig(framework="torch", grace=0), registry=registry).start()
    server = Server(ServerConfig(grace=0), registry=registry).start()
    server_channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    agent_channel = grpc.insecure_channel(f"127.0.0.1:{agent.server.port}")
    try:
        wait_for(lambda: server.fleet.agents(), 30, "the agent at the server")
        opened = predictor_pb2.OpenResponse.FromString(
            agent_channel.unary_unary(PREDICTOR + "Open")(
                predictor_pb2.OpenRequest(
                    spec=types_pb2.ModelSpec(model="digits_cnn", hw="cpu")
                ).SerializeToString(),
                timeout=DEADLINE_S,
            )
        )
        yield Fleet(
            server,
            agent,
            registry,
            server_channel,
            agent_channel,
            canary,
            opened.session_id,
            FileAudit.get(),
        )
    finally:
        server_channel.close()
        agent_channel.close()
        server.stop(0)
        agent.stop(0)
        registry.close()
        shutil.rmtree(canary, ignore_errors=True)


def _canary(folder: Path) -> Path:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), "red").save(folder / "secret.png")
    (folder / "secret.json").write_text('{"secret": true}')
    (folder / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return folder.resolve()


@pytest.fixture
def guard(fleet: Fleet) -> Iterator[Fleet]:
    """``fleet`` while recording file access; afterwards, the checks of the module docstring."""
    fleet.audit.take()
    fleet.audit.recording = True
    try:
        yield fleet
    finally:
        fleet.audit.recording = False
    seen = fleet.audit.take()
    assert fleet.healthy()
    wait_for(lambda: fleet.agent.load.count == 0, 10, "no evaluation in flight on the agent")
    assert jobs.in_flight(fleet.registry) == []
    outside = outside_the_store(seen, fleet.canary)
    assert not outside, f"opened outside the store: {sorted(set(outside))}"
    assert fleet.slowest < DEADLINE_S


def fuzz(examples: int, *checks: HealthCheck):
    """hypothesis settings for a fuzz test of ``examples`` cases (times ``MLMS_FUZZ_SCALE``)."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        derandomize=True,
        deadline=None,
        database=None,
        # The fleet fixture is shared by design: cases must not change what it serves.
        suppress_health_check=[HealthCheck.function_scoped_fixture, *checks],
    )


# -- values ------------------------------------------------------------------------------------

#: Files a path traversal would reach, outside the store: an image and a record that parse if
#: read. One folder per process, so that its paths can be part of the strategies.
CANARY = Path(tempfile.gettempdir()).resolve() / f"mlms-fuzz-canary-{os.getpid()}"
PATHS = [
    "../../etc/passwd",
    "../../../../../../../../etc/passwd",
    "/etc/passwd",
    "/etc/shadow",
    "/proc/self/environ",
    "~/.ssh/id_rsa",
    f"{CANARY}/secret",
    f"{CANARY}/secret.png",
    f"{CANARY}/secret.json",
    "../" * 16 + f"{str(CANARY).lstrip('/')}/secret",
    "../" * 16 + f"{str(CANARY).lstrip('/')}/secret.png",
    "evaluations/../../../../../../../../etc/passwd",
    "traces/../../secret",
    "..",
    ".",
    "/",
    "",
    "a\x00b",
    "\x00",
    f"{CANARY}/secret\x00.png",
    "..\\..\\windows\\system32",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "file:///etc/passwd",
    "s3://another-bucket/evaluations/x.json",
    "*",
    "?",
    "[0-9]",
]
ZOO = ["digits_cnn", "resnet50", "alexnet", "mobilenet_v2", "inception_v3"]
HEX = "0123456789abcdef"

paths = st.sampled_from(PATHS)
#: Text protobuf can carry (no lone surrogates).
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=64)
hex_ids = st.text(HEX, min_size=0, max_size=40)
#: Ids of every kind: path-like, any text, hex (prefixes of real ids), long and odd ones.
ids = st.one_of(
    paths,
    texts,
    hex_ids,
    st.text(HEX + "-_./", max_size=80),
    st.builds(lambda n: "a" * n, st.integers(100, 5000)),
)
int32s = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-3, 3))
int64s = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-3, 300))


# -- raw bytes ----------------------------------------------------------------------------------

ALL_METHODS = [(EVALUATOR, m) for m in SERVER_METHODS] + [(PREDICTOR, m) for m in AGENT_METHODS]


@fuzz(2000)
@given(target=st.sampled_from(ALL_METHODS), data=st.binary(max_size=256))
def test_random_bytes(guard: Fleet, target: tuple[str, str], data: bytes) -> None:
    service, method = target
    checked(guard.call(service, method, data), method)


# -- protobuf wire records ----------------------------------------------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative numbers are ten-byte two's complement on the wire
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


field_numbers = st.one_of(st.integers(1, 5), st.integers(1, 2**29 - 1))
wire_types = st.sampled_from([0, 1, 2, 5])
varints = st.one_of(st.integers(-(2**63), 2**64 - 1), st.integers(-3, 3))
fixed64s = st.binary(min_size=8, max_size=8)
fixed32s = st.binary(min_size=4, max_size=4)
payload_bytes = [
    st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=40),
]


@st.composite
def wire_records(draw, depth: int = 2) -> bytes:
    """A well-formed protobuf encoding of random fields: numbers the messages have (1..5) and
    some they lack, any wire type, varints up to 2**64 and length-delimited payloads that are
    text, bytes or nested records. Whether it parses as the method's message depends on the
    field's declared type: this is how "wrong types" reach the servers."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 6))):
        number = draw(field_numbers)
        wire = draw(wire_types)
        out += _varint(number << 3 | wire)
        if wire == 0:
            out += _varint(draw(varints))
        elif wire == 1:
            out += draw(fixed64s)
        elif wire == 5:
            out += draw(fixed32s)
        else:
            payload = draw(PAYLOADS[depth])
            out += _varint(len(payload)) + payload
    return bytes(out)


#: A length-delimited payload at each depth of ``wire_records``: text, bytes, or records one
#: level down. Made once, not at every draw (hypothesis checks each strategy it is given anew).
PAYLOADS = {
    0: st.one_of(*payload_bytes, st.just(b"")),
    1: st.one_of(*payload_bytes, wire_records(0)),
    2: st.one_of(*payload_bytes, wire_records(1)),
}


@fuzz(2000)
@given(target=st.sampled_from(ALL_METHODS), data=wire_records())
def test_wire_records_of_random_fields_and_types(
    guard: Fleet, target: tuple[str, str], data: bytes
) -> None:
    service, method = target
    checked(guard.call(service, method, data), method)


# -- typed messages -----------------------------------------------------------------------------

OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE

ANALYSIS_NAMES = ["layer_table", "slowest_layers", "layer_types", "kernel_breakdown", "model_costs"]

lookups = st.one_of(
    st.builds(
        lambda i: ("GetEvaluation", evaluator_pb2.GetEvaluationRequest(evaluation_id=i)), ids
    ),
    st.builds(lambda i: ("GetSpans", evaluator_pb2.GetSpansRequest(trace_id=i)), ids),
    st.builds(
        lambda e, a, t: (
            "Analyze",
            evaluator_pb2.AnalyzeRequest(evaluation_ids=e, analyses=a, top=t),
        ),
        st.lists(ids, max_size=4),
        st.lists(st.one_of(st.sampled_from(ANALYSIS_NAMES), texts), max_size=4),
        int32s,
    ),
)


@fuzz(1500)
@given(case=lookups)
def test_lookups_by_id(guard: Fleet, case) -> None:
    method, request = case
    call = guard.call(EVALUATOR, method, request.SerializeToString())
    checked(call, method, OK, INVALID, NOT_FOUND)


dtypes = st.one_of(
    st.sampled_from(
        ["float32", "float16", "uint8", "int64", "float64", "bool", "object", "U8", "V4", "<f4"]
    ),
    texts,
)
shapes = st.one_of(
    st.lists(int64s, max_size=6),
    st.lists(st.integers(0, 9), max_size=6),
    st.lists(st.integers(0, 2), min_size=30, max_size=80),  # numpy has at most 64 axes
    st.builds(lambda n: [n, 1, 8, 8], st.integers(-2, 64)),
)


@st.composite
def tensor_messages(draw) -> types_pb2.Tensor:
    """Tensors of any shape and dtype whose data often fits them, and now and then a valid
    digits_cnn batch (n x 1 x 8 x 8 float32)."""
    if draw(st.integers(0, 3)) == 0:
        shape, dtype = [draw(st.integers(1, 16)), 1, 8, 8], "float32"
    else:
        shape, dtype = draw(shapes), draw(dtypes)
    size = math.prod(shape) * (np.dtype(dtype).itemsize if dtype in tensors.DTYPES else 4)
    fits = 0 <= size <= 4096 and draw(st.booleans())
    data = bytes(size) if fits else draw(st.binary(max_size=512))
    return types_pb2.Tensor(data=data, shape=shape, dtype=dtype)


TENSORS = tensor_messages()


def _png(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (width % 256, height % 256, 7)).save(out, "PNG")
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_claiming(width: int, height: int, rows: int = 0) -> bytes:
    """A PNG that declares ``width`` x ``height`` RGB pixels and holds ``rows`` rows of them (a
    decompression bomb is such a file with every row: zeros compress a thousandfold)."""
    pixels = zlib.compress((b"\0" * (1 + 3 * width)) * rows if rows else b"")
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + _chunk(b"IDAT", pixels)
        + _chunk(b"IEND", b"")
    )


images = st.one_of(
    st.binary(max_size=64),
    st.builds(_png, st.integers(1, 40), st.integers(1, 40)),
    st.builds(_png_claiming, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)),
    st.builds(
        lambda png, n: png[:n],
        st.builds(_png, st.integers(1, 9), st.integers(1, 9)),
        st.integers(0, 80),
    ),
)


model_names = st.one_of(st.sampled_from(ZOO), ids)
predict_frameworks = st.one_of(st.sampled_from(["", "torch", "onnxruntime"]), texts)
predict_hardware = st.one_of(st.sampled_from(["", "cpu", "gpu", "v100"]), texts)
batch_kinds = st.sampled_from(["tensor", "images", "none"])
image_lists = st.lists(images, max_size=4)


@st.composite
def predict_requests(draw, session: str) -> calls_pb2.PredictRequest:
    request = calls_pb2.PredictRequest(
        session_id=draw(st.one_of(st.just(session), ids)),
        spec=types_pb2.ModelSpec(
            model=draw(model_names),
            framework=draw(predict_frameworks),
            hw=draw(predict_hardware),
        ),
        top_k=draw(int32s),
    )
    batch = draw(batch_kinds)
    if batch == "tensor":
        request.tensor.CopyFrom(draw(TENSORS))
    elif batch == "images":
        request.images.images.extend(draw(image_lists))
    return request


@fuzz(1500)
@given(data=st.data())
def test_predict_on_the_agent(guard: Fleet, data: st.DataObject) -> None:
    request = data.draw(predict_requests(guard.session_id))
    checked(
        guard.call(PREDICTOR, "Predict", request.SerializeToString()),
        "Predict",
        OK,
        INVALID,
        NOT_FOUND,
    )


@fuzz(1000)
@given(data=st.data())
def test_predict_through_the_server(guard: Fleet, data: st.DataObject) -> None:
    """The server picks the agent by the request's spec; only digits_cnn on cpu reaches it (the
    other zoo models would build their assets: their specs carry a framework or hw that fails)."""
    request = data.draw(predict_requests(""))
    spec = request.spec
    assume(
        spec.model == "digits_cnn"
        or spec.model not in ZOO
        or not _runs_here(spec.framework, spec.hw)
    )
    call = guard.call(EVALUATOR, "Predict", request.SerializeToString())
    checked(call, "Predict", OK, INVALID, NOT_FOUND, PRECONDITION, UNAVAILABLE)


def _runs_here(framework: str | None, hw: str | None) -> bool:
    """Whether an agent here might accept this framework and hw (then a zoo model would be
    loaded, its asset built first): erring on yes keeps the expensive cases out."""
    if not isinstance(hw, str | type(None)) or not isinstance(framework, str | type(None)):
        return False
    try:
        hardware.resolve(hw or "cpu")
    except MlmsError:
        return False
    return not framework or framework.strip().lower().startswith("torch")


@fuzz(400)
@given(
    model=st.one_of(st.sampled_from(ZOO), ids),
    framework=st.one_of(st.sampled_from(["", "torch", "onnxruntime", "torch>=99"]), texts),
    hw=st.one_of(st.sampled_from(["", "cpu", "gpu", "a100"]), texts),
)
def test_open_and_close_on_the_agent(guard: Fleet, model: str, framework: str, hw: str) -> None:
    """Only digits_cnn opens (its session is closed again); other zoo models come with a
    framework or hw that fails before their assets would be built."""
    assume(model == "digits_cnn" or model not in ZOO or not _runs_here(framework, hw))
    request = predictor_pb2.OpenRequest(
        spec=types_pb2.ModelSpec(model=model, framework=framework, hw=hw)
    )
    call = checked(
        guard.call(PREDICTOR, "Open", request.SerializeToString()),
        "Open",
        OK,
        INVALID,
        NOT_FOUND,
        PRECONDITION,
    )
    if call.code == OK:
        opened = predictor_pb2.OpenResponse.FromString(call.replies[0])
        close = predictor_pb2.CloseRequest(session_id=opened.session_id).SerializeToString()
        checked(guard.call(PREDICTOR, "Close", close), "Close", OK)


@fuzz(400)
@given(session=ids)
def test_close_unknown_sessions(guard: Fleet, session: str) -> None:
    request = predictor_pb2.CloseRequest(session_id=session).SerializeToString()
    checked(guard.call(PREDICTOR, "Close", request), "Close", NOT_FOUND)


# -- evaluation and bound requests --------------------------------------------------------------

#: Values of the wrong type for any field.
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
    paths,
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(texts, st.integers(), max_size=2),
)
huge = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([2**31, 2**63, 10**30, -1]))
counts = st.one_of(st.integers(-3, 40), huge, junk)
seconds = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, 0.0, 1e308, -0.0]), junk
)
int64s = st.one_of(
    st.integers(-3, 40),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([2**31, 2**63 - 1, -(2**63), -1]),
)
doubles = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1e308, -0.0])
)
#: Every field of both specs (each message takes its own), with any value its type holds.
spec_fields = {
    "model": st.one_of(st.sampled_from(ZOO), ids),
    "framework": st.one_of(st.sampled_from(["", "torch", "onnxruntime", "torch^9"]), texts),
    "hw": st.one_of(st.sampled_from(["", "cpu", "gpu", "h100", "CPU"]), texts),
    "batch_sizes": st.lists(int64s, max_size=4),
    "iterations": int64s,
    "warmup": int64s,
    "min_seconds": doubles,
    "trace_level": st.integers(-(2**31), 2**31 - 1),  # any enum number, known or not
    "inputs": st.one_of(
        st.sampled_from([["synthetic"], ["dataset"], ["synthetic", "dataset"], []]),
        st.lists(st.one_of(paths, texts), min_size=1, max_size=3),
    ),
    "intra_op_threads": int64s,
    "inter_op_threads": int64s,
    "seed": int64s,
    "precisions": st.lists(st.sampled_from(["fp32", "fp16", "int4", ""])).map(
        lambda values: types_pb2.StringList(values=values)
    ),
    "repeats": int64s,
    "dataset": st.one_of(st.sampled_from(["digits", "a/b", "../x", "", "x@2", "x@../1"]), texts),
}


SPEC_MESSAGES = {"Evaluate": evaluation_pb2.EvaluationSpec, "Bound": bound_pb2.BoundSpec}
#: Each spec's subsets of the fields above that it has.
spec_field_sets = {
    kind: st.sets(
        st.sampled_from([n for n in sorted(spec_fields) if n in message.DESCRIPTOR.fields_by_name])
    )
    for kind, message in SPEC_MESSAGES.items()
}


@st.composite
def specs(draw, kind: str) -> evaluation_pb2.EvaluationSpec | bound_pb2.BoundSpec:
    """An ``EvaluationSpec`` (Evaluate) or a ``BoundSpec`` (Bound) with any subset of its
    fields set, each to any value of its type."""
    names = draw(spec_field_sets[kind])
    return SPEC_MESSAGES[kind](**{name: draw(spec_fields[name]) for name in sorted(names)})


#: ``specs`` of each kind, made once.
SPECS = {kind: specs(kind) for kind in SPEC_MESSAGES}


def _request(
    kind: str, spec, job_id: str = ""
) -> calls_pb2.EvaluateRequest | calls_pb2.BoundRequest:
    if kind == "Evaluate":
        return calls_pb2.EvaluateRequest(spec=spec, evaluation_id=job_id)
    return calls_pb2.BoundRequest(spec=spec, bound_id=job_id)


def _starts_work(spec, kind: str) -> bool:
    """Whether ``spec`` gets past validation and starts an evaluation or a bound (which takes
    seconds): a valid request of a zoo model with a framework, hw and level an agent here
    could take. Erring on yes keeps the expensive cases out."""
    try:
        request = evaluation_request(spec) if kind == "Evaluate" else bound_request(spec)
    except MlmsError:
        return False
    if request.model not in ZOO or not _runs_here(request.framework, request.hw):
        return False
    if isinstance(request, EvaluationRequest):
        try:
            leveled_runs(request.trace_level, "cpu")
        except MlmsError:
            return False
    return True


@fuzz(1200)
@given(data=st.data(), kind=st.sampled_from(["Evaluate", "Bound"]))
def test_evaluate_and_bound_through_the_server(
    guard: Fleet, data: st.DataObject, kind: str
) -> None:
    spec = data.draw(SPECS[kind])
    assume(not _starts_work(spec, kind))
    call = guard.call(EVALUATOR, kind, _request(kind, spec).SerializeToString())
    checked(call, kind, INVALID, NOT_FOUND, PRECONDITION, UNAVAILABLE)


@fuzz(1200)
@given(
    data=st.data(),
    kind=st.sampled_from(["Evaluate", "Bound"]),
    job_id=st.one_of(st.just(""), hex_ids, ids),
)
def test_evaluate_and_bound_on_the_agent(
    guard: Fleet, data: st.DataObject, kind: str, job_id: str
) -> None:
    spec = data.draw(SPECS[kind])
    assume(not _starts_work(spec, kind))
    call = guard.call(PREDICTOR, kind, _request(kind, spec, job_id).SerializeToString())
    checked(call, kind, INVALID, NOT_FOUND, PRECONDITION)


def _starts_sweep(request: sweep_pb2.SweepRequest) -> bool:
    """Whether a sweep request would run evaluations: a valid spec and no id."""
    if request.sweep_id:
        return False
    try:
        from_proto(request.spec, SweepSpec, "sweep request")
    except MlmsError:
        return False
    return True


@fuzz(400)
@given(
    models=st.lists(st.one_of(st.sampled_from(ZOO), ids), max_size=3),
    frameworks=st.lists(st.one_of(st.sampled_from(["torch", "jax", ""]), texts), max_size=3),
    batch_sizes=st.lists(int64s, max_size=3),
    hw=st.lists(st.one_of(st.sampled_from(["cpu", "tpu", "H100"]), texts), max_size=3),
    sweep_id=st.one_of(st.just(""), hex_ids, ids),
)
def test_sweep_requests(
    guard: Fleet,
    models: list[str],
    frameworks: list[str],
    batch_sizes: list[int],
    hw: list[str],
    sweep_id: str,
) -> None:
    spec = sweep_pb2.SweepSpec(models=models, frameworks=frameworks, batch_sizes=batch_sizes, hw=hw)
    request = sweep_pb2.SweepRequest(spec=spec, sweep_id=sweep_id)
    assume(not _starts_sweep(request))
    call = guard.call(EVALUATOR, "Sweep", request.SerializeToString())
    checked(call, "Sweep", INVALID, NOT_FOUND)


# -- valid messages, mutated --------------------------------------------------------------------

QUICK_EVALUATION = evaluation_pb2.EvaluationSpec(
    model="digits_cnn", iterations=2, warmup=0, min_seconds=0
)


def _valid_messages(session: str) -> dict[tuple[str, str], bytes]:
    """One valid request for every method that takes fields (the others' are empty)."""
    tensor = tensors.to_proto(np.zeros((2, 1, 8, 8), np.float32))
    predict = calls_pb2.PredictRequest(
        session_id=session, spec=types_pb2.ModelSpec(model="digits_cnn"), tensor=tensor, top_k=3
    )
    bound = bound_pb2.BoundSpec(model="digits_cnn", repeats=3, iterations=1, min_seconds=0)
    messages = {
        "Predict": predict,
        "Evaluate": calls_pb2.EvaluateRequest(spec=QUICK_EVALUATION),
        "Bound": calls_pb2.BoundRequest(spec=bound),
        "GetEvaluation": evaluator_pb2.GetEvaluationRequest(evaluation_id="0123abcd"),
        "GetSpans": evaluator_pb2.GetSpansRequest(trace_id="0123456789abcdef" * 2),
        "Analyze": evaluator_pb2.AnalyzeRequest(
            evaluation_ids=["0123abcd"], analyses=["layer_table"], top=2
        ),
        "Open": predictor_pb2.OpenRequest(spec=types_pb2.ModelSpec(model="digits_cnn")),
        "Close": predictor_pb2.CloseRequest(session_id="0123456789abcdef" * 2),
    }
    return {
        (service, method): messages[method].SerializeToString()
        for service, method in ALL_METHODS
        if method in messages
    }


@st.composite
def mutations(draw, data: bytes) -> bytes:
    """``data`` with one to three bytes flipped, ranges cut or bytes put in."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(out)))
        op = draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        if op == "flip" and at < len(out):
            out[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del out[at : at + draw(st.integers(1, 8))]
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del out[at:]
    return bytes(out)


def _starts_work_as(method: str, data: bytes) -> bool:
    """Whether mutated bytes still make a request that would run an evaluation or a bound,
    or load a model other than digits_cnn."""
    message, _ = SERVER_METHODS.get(method) or AGENT_METHODS[method]
    try:
        request = message.FromString(data)
    except Exception:
        return False
    if method in ("Evaluate", "Bound"):
        return _starts_work(request.spec, method)
    if method in ("Open", "Predict"):
        spec = request.spec
        return (
            spec.model in ZOO and spec.model != "digits_cnn" and _runs_here(spec.framework, spec.hw)
        )
    return False


@fuzz(1500)
@given(data=st.data())
def test_valid_messages_mutated(guard: Fleet, data: st.DataObject) -> None:
    (service, method), valid = data.draw(
        st.sampled_from(sorted(_valid_messages(guard.session_id).items()))
    )
    mutated = data.draw(mutations(valid))
    assume(not _starts_work_as(method, mutated))
    call = checked(guard.call(service, method, mutated), method)
    if service == PREDICTOR and method == "Open" and call.code == OK:
        opened = predictor_pb2.OpenResponse.FromString(call.replies[0])
        close = predictor_pb2.CloseRequest(session_id=opened.session_id).SerializeToString()
        checked(guard.call(PREDICTOR, "Close", close), "Close", OK)


# -- requests and manifests, without gRPC -------------------------------------------------------


@fuzz(1500)
@given(data=st.data(), kind=st.sampled_from(["Evaluate", "Bound"]))
def test_a_request_parses_into_bounded_values_or_names_its_bad_field(
    data: st.DataObject, kind: str
) -> None:
    """What the agents receive: either one line naming the bad field, or values the runner
    can use as they are (no negative seed for numpy, no endless loop, no 10**9 batch)."""
    parse = evaluation_request if kind == "Evaluate" else bound_request
    try:
        request = parse(data.draw(SPECS[kind]))
    except InvalidArgument as exc:
        message = str(exc)
        assert message.startswith("bad ") and "\n" not in message and len(message) < 400
        return
    assert 1 <= len(request.batch_sizes) <= MAX_BATCH_SIZES
    assert all(1 <= b <= MAX_BATCH_SIZE for b in request.batch_sizes)
    assert 1 <= request.iterations <= MAX_ITERATIONS
    assert 0 <= request.min_seconds <= MAX_SECONDS
    if isinstance(request, EvaluationRequest):
        assert request.inputs in (["synthetic"], ["dataset"])
        if request.dataset is not None:
            parse_reference(request.dataset)  # a plain name: no way out of datasets/
        assert 0 <= request.warmup <= MAX_WARMUP
        np.random.default_rng(request.seed)
        for threads in (request.intra_op_threads, request.inter_op_threads):
            assert threads is None or 1 <= threads <= MAX_THREADS


MANIFEST = yaml.safe_load((BUILTIN_DIR / "digits_cnn.yaml").read_text())
url_sources = st.fixed_dictionaries(
    {
        "kind": st.just("url"),
        "framework": st.one_of(st.just("torch"), junk),
        "url": st.one_of(
            st.sampled_from(
                [
                    "https://example.org/w.pth",
                    "file:///etc/passwd",
                    f"file://{CANARY}/secret.png",
                    "ftp://example.org/w",
                    "http://",
                    "//example.org/w",
                    "https://example.org/../../etc/passwd",
                ]
            ),
            texts,
            junk,
        ),
        "sha256": st.one_of(st.just("0" * 64), hex_ids, junk),
        "filename": st.one_of(st.just("w.pth"), paths, texts, junk),
    }
)
#: Where a mutation goes in the manifest, and what it puts there.
MUTATIONS = {
    ("name",): st.one_of(ids, junk),
    ("version",): st.one_of(st.sampled_from(["1.0", "1.0+../x", "v1", ""]), texts, junk),
    ("task",): junk,
    ("frameworks",): st.one_of(st.just([]), junk),
    ("frameworks", 0, "version"): st.one_of(st.sampled_from([">=2", "=>2", "~=", ""]), texts),
    ("inputs", 0, "shape"): st.one_of(st.lists(huge, max_size=4), st.lists(counts, max_size=4)),
    ("inputs", 0, "dtype"): st.one_of(dtypes, junk),
    ("inputs", 0, "preprocessing", "scale"): seconds,
    ("inputs", 0, "preprocessing", "mean"): st.one_of(st.lists(seconds, max_size=5), junk),
    ("inputs", 0, "preprocessing", "resize"): counts,
    ("outputs", 0, "labels"): st.one_of(paths, texts, st.lists(texts, max_size=3), junk),
    ("sources", 0, "builder"): st.one_of(paths, texts, junk),
    ("sources", 0, "seed"): counts,
    ("sources", 0): st.one_of(url_sources, junk),
    ("dataset",): st.one_of(st.none(), st.just({"name": "digits"}), junk),
    ("attributes",): st.one_of(st.dictionaries(texts, junk, max_size=3), junk),
    ("../extra",): junk,
}


def _mutated(manifest: dict, where: tuple, value: object) -> dict:
    copy = json.loads(json.dumps(manifest))
    target = copy
    for key in where[:-1]:
        try:
            target = target[key]
        except (KeyError, IndexError, TypeError):
            return copy  # an earlier mutation replaced the field this one goes into
    with contextlib.suppress(IndexError, TypeError):
        target[where[-1]] = value
    return copy


not_manifests = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"[" * 5000, b"\xff\xfe", b"a: !!python/object:os.system x"]),
)
mutated_fields = st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=2)


@st.composite
def manifest_files(draw) -> bytes:
    """The YAML of digits_cnn's manifest with a few fields replaced; or any bytes at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(not_manifests)
    manifest = MANIFEST
    for where in draw(mutated_fields):
        manifest = _mutated(manifest, where, draw(MUTATIONS[where]))
    return yaml.safe_dump(manifest, allow_unicode=True).encode("utf-8", "surrogatepass")


@fuzz(1500, HealthCheck.too_slow)  # a valid manifest takes pydantic and packaging a while
@given(content=manifest_files())
def test_a_manifest_loads_with_safe_paths_or_names_its_file_and_field(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "model.yaml"
    path.write_bytes(content)
    try:
        manifest = load_manifest(path)
    except ManifestError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ") and "\n" not in message
        return
    for source in manifest.sources:
        if isinstance(source, UrlSource):
            assert source.url.startswith(("https://", "http://"))
            assert (tmp_path / source.filename).parent == tmp_path
    labels = manifest.outputs[0].labels
    if isinstance(labels, str):
        assert (LABELS_DIR / f"{labels}.txt").resolve().parent == LABELS_DIR.resolve()
    assert math.prod(manifest.inputs[0].shape) <= MAX_SAMPLE_VALUES


# -- what fuzzing rarely reaches: sizes -----------------------------------------------------------


def test_oversized_messages_are_resource_exhausted(guard: Fleet) -> None:
    """Past ``MAX_MESSAGE_BYTES`` every method of both services answers RESOURCE_EXHAUSTED
    (from a client whose own limit is off, so that the servers have to refuse)."""
    payload = b"x" * (MAX_MESSAGE_BYTES + 1)
    message = b"\x0a" + _varint(len(payload)) + payload  # field 1, length-delimited
    unlimited = [("grpc.max_send_message_length", -1)]
    for address, service, table in (
        (f"127.0.0.1:{guard.server.port}", EVALUATOR, SERVER_METHODS),
        (f"127.0.0.1:{guard.agent.server.port}", PREDICTOR, AGENT_METHODS),
    ):
        with grpc.insecure_channel(address, options=unlimited) as channel:
            for method, (_, streaming) in table.items():
                call = invoke(channel, service + method, streaming, message)
                assert call.code == grpc.StatusCode.RESOURCE_EXHAUSTED, (method, call)


def _bomb(side: int) -> bytes:
    """A real PNG of ``side`` x ``side`` black pixels: a few hundred KB that decode to
    3 * side**2 bytes."""
    return _png_claiming(side, side, rows=side)


def test_image_pixels_are_bounded_before_decoding(guard: Fleet) -> None:
    """A small PNG can declare hundreds of megapixels; the agent reads the sizes from the
    headers and refuses before decoding (one image, then a batch of images each within the
    limit)."""
    big = _bomb(math.isqrt(MAX_IMAGE_PIXELS) + 1)
    request = calls_pb2.PredictRequest(
        session_id=guard.session_id, images=types_pb2.ImageBatch(images=[_png(8, 8), big])
    )
    call = checked(guard.call(PREDICTOR, "Predict", request.SerializeToString()), "", INVALID)
    side = math.isqrt(MAX_IMAGE_PIXELS) + 1
    assert call.details == (
        f"image 1 of the batch is {side} x {side} pixels: expected at most "
        f"{MAX_IMAGE_PIXELS:,} pixels an image"
    )
    within = _bomb(math.isqrt(MAX_IMAGE_PIXELS))
    count = MAX_BATCH_PIXELS // MAX_IMAGE_PIXELS + 1
    request = calls_pb2.PredictRequest(
        session_id=guard.session_id, images=types_pb2.ImageBatch(images=[within] * count)
    )
    call = checked(guard.call(PREDICTOR, "Predict", request.SerializeToString()), "", INVALID)
    assert call.details.startswith(f"images 0 to {count - 1} of the batch hold more than ")


# -- valid requests: a handful, end to end --------------------------------------------------------


def test_valid_requests_still_work(guard: Fleet) -> None:
    """The cases above refuse nearly everything; these few valid calls show that the checks
    did not refuse good requests too (an evaluation on the server and on the agent, a predict
    of images and a tensor, a lookup of the record)."""
    quick = evaluation_pb2.EvaluationSpec(
        model="digits_cnn", batch_sizes=[1, 2], iterations=2, warmup=0, min_seconds=0
    )
    records = []
    for service in (EVALUATOR, PREDICTOR):
        call = checked(
            guard.call(
                service,
                "Evaluate",
                calls_pb2.EvaluateRequest(spec=quick).SerializeToString(),
            ),
            "Evaluate",
            OK,
        )
        last = calls_pb2.EvaluateEvent.FromString(call.replies[-1])
        records.append(from_proto(last.evaluation, EvaluationRecord, "record"))
    assert [len(r.results) for r in records] == [2, 2]
    lookup = evaluator_pb2.GetEvaluationRequest(evaluation_id=records[0].id[:12].upper())
    call = checked(guard.call(EVALUATOR, "GetEvaluation", lookup.SerializeToString()), "", OK)
    found = evaluator_pb2.GetEvaluationResponse.FromString(call.replies[0])
    assert found.record.id == records[0].id
    for batch in (
        {"images": types_pb2.ImageBatch(images=[_png(8, 8), _png(30, 20)])},
        {"tensor": tensors.to_proto(np.zeros((3, 1, 8, 8), np.float32))},
    ):
        request = calls_pb2.PredictRequest(
            spec=types_pb2.ModelSpec(model="digits_cnn"), top_k=3, **batch
        )
        call = checked(guard.call(EVALUATOR, "Predict", request.SerializeToString()), "", OK)
        reply = calls_pb2.PredictResponse.FromString(call.replies[0])
        assert len(reply.top) == tensors.from_proto(reply.logits).shape[0]


# -- the checks check -----------------------------------------------------------------------------


def test_the_audit_sees_a_server_thread_read_outside_the_store(fleet: Fleet) -> None:
    """What ``guard`` relies on: an open by another thread than the test's is recorded, and
    one outside the store is reported while one inside is not."""
    inside = mlms_home() / "store" / "fuzz-audit-probe"
    inside.parent.mkdir(parents=True, exist_ok=True)

    def touch() -> None:
        inside.write_text("probe")
        (CANARY / "secret.json").read_text()

    fleet.audit.take()
    fleet.audit.recording = True
    try:
        worker = threading.Thread(target=touch)
        worker.start()
        worker.join()
    finally:
        fleet.audit.recording = False
        inside.unlink()
    outside = outside_the_store(fleet.audit.take(), fleet.canary)
    assert outside == [("open", str(CANARY / "secret.json"))]
