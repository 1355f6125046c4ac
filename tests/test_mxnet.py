"""The MXNet predictor and its child agent, on real Gluon networks on the CPU.

MXNet 1.9 imports only with numpy 1.23, so its code runs in MXNet's own virtualenv
(.venv-mxnet, made by scripts/setup.sh): these tests start real processes there. Without that
virtualenv they fail, saying to run scripts/setup.sh (CI runs it first); they never skip.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest

from mlms.assets.digits import load_split
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.client import EmbeddedClient
from mlms.errors import InvalidArgument, UnsupportedFramework
from mlms.evaluation.record import EvaluationRequest
from mlms.frameworks import own_interpreter
from mlms.predictors.mxnet_predictor import BULK, GraphNode, OpEvent, align
from mlms.protos.mlms.v2 import predictor_pb2, predictor_pb2_grpc
from mlms.tasks.preprocess import preprocess
from mlms.tracer.archive import read_spans
from mlms.tracer.layer_kinds import normalise_kind
from tests.framework_checks import nested_layers
from tests.processes import MlmsProcess, wait_for

#: Runs in MXNet's interpreter: load the predictor, predict the saved batch, profile two
#: predicts, print what happened as JSON.
PROFILE_SCRIPT = """
import json, sys
import numpy as np
from mlms.predictors.base import PredictorOptions
from mlms.predictors.mxnet_predictor import MXNetPredictor
from mlms.catalog.zoo import get_model
model, asset, batch_file = sys.argv[1:]
batch = np.load(batch_file)
with MXNetPredictor(get_model(model), asset, PredictorOptions()) as predictor:
    logits = predictor.predict(batch)
    with predictor.profile_layers() as capture:
        predictor.predict(batch)
        predictor.predict(batch)
    graph = [node.name for node in predictor.graph]
events = [
    {"name": e.name, "kind": e.kind, "start": e.start_ns, "end": e.end_ns,
     "index": e.layer_index, "attributes": e.attributes}
    for e in capture.events
]
print(json.dumps({"logits": logits.tolist(), "events": events, "graph": graph}))
"""


@pytest.fixture(scope="module")
def mxnet_python() -> Path:
    python = own_interpreter("mxnet")
    if python is None:  # MXNet imports in this environment itself
        return Path(sys.executable)
    if not python.exists():
        pytest.fail(
            f"MXNet's virtualenv is missing ({python}): run scripts/setup.sh, which creates it"
        )
    return python


@pytest.fixture(scope="module")
def assets(store, mlms_home) -> AssetManager:
    return AssetManager(store, mlms_home / "cache")


def _profile_in_mxnet(python: Path, model: str, asset: Path, batch: np.ndarray, tmp: Path) -> dict:
    np.save(tmp / "batch.npy", batch)
    result = subprocess.run(
        [str(python), "-c", PROFILE_SCRIPT, model, str(asset), str(tmp / "batch.npy")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_digits_on_mxnet_computes_the_torch_function_and_profiles_layers(
    mxnet_python: Path, assets: AssetManager, tmp_path: Path
) -> None:
    import torch

    manifest = get_model("digits_cnn")
    asset = assets.ensure(manifest, "mxnet")
    batch = preprocess(list(load_split().test_images[:16]), manifest.inputs[0])
    module = assets.canonical_module(manifest)  # outside inference mode: it may train
    with torch.inference_mode():
        expected = module(torch.from_numpy(batch)).numpy()
    result = _profile_in_mxnet(mxnet_python, "digits_cnn", asset.path, batch, tmp_path)
    np.testing.assert_allclose(np.array(result["logits"]), expected, atol=1e-4)
    events = result["events"]
    assert len(events) % 2 == 0
    first, second = events[: len(events) // 2], events[len(events) // 2 :]
    assert [e["name"] for e in first] == [e["name"] for e in second]
    # Layers are named after the torch module paths, whether MXNet ran them alone or in a bulk.
    assert {"0", "1", "2", "3", "4", "6", "7", "8"} <= {e["name"] for e in first}
    assert {"conv", "relu", "pool", "gemm", "reshape"} <= {e["kind"] for e in first}
    assert [e["index"] for e in first] == list(range(len(first)))
    assert all(e["end"] >= e["start"] for e in events)
    assert first[-1]["end"] <= second[0]["start"]


def test_gluon_model_zoo_network_builds_in_its_interpreter_and_profiles(
    mxnet_python: Path, assets: AssetManager, tmp_path: Path
) -> None:
    """ResNet-18 v1 from the Gluon model zoo, seeded; its asset is written by MXNet's own
    interpreter (a subprocess from here), its layers aligned with the hybridized graph."""
    manifest = get_model("resnet18")
    asset = assets.ensure(manifest, "mxnet")
    weights = np.load(asset.path)
    assert str(weights["__model_zoo__"]) == "resnet18_v1"
    batch = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    result = _profile_in_mxnet(mxnet_python, "resnet18", asset.path, batch, tmp_path)
    logits = np.array(result["logits"])
    assert logits.shape == (1, 1000) and np.isfinite(logits).all()
    events = result["events"][: len(result["events"]) // 2]
    graph = set(result["graph"])
    named = [e for e in events if e["name"] in graph]
    assert len(named) >= 0.95 * len(result["graph"])  # nearly every graph node is found
    kinds = {e["kind"] for e in events}
    assert {"conv", "batchnorm", "relu", "add", "pool", "gemm"} <= kinds
    assert any(e["attributes"].get("output_shape") == [64, 56, 56] for e in events)


def test_embedded_eval_runs_mxnet_in_a_child_agent_of_its_own_env(
    mxnet_python: Path, store
) -> None:
    request = EvaluationRequest(
        model="digits_cnn",
        framework="mxnet",
        batch_sizes=[1, 4],
        iterations=3,
        warmup=1,
        min_seconds=0,
        trace_level="framework",
        inputs=["dataset"],
    )
    seen = []
    record = EmbeddedClient(store).evaluate(request, seen.append)
    assert record.framework.name == "mxnet" and record.framework.version == "1.9.1"
    assert record.software["executable"] == str(mxnet_python)
    assert record.software["numpy"] == "1.23.5"
    assert record.agent["address"].startswith("127.0.0.1:")
    assert record.accuracy is not None and record.accuracy.top1 > 0.95
    assert {event.run for event in seen} >= {"warmup", "model", "framework"}  # streamed back
    nested_layers(read_spans(store, record.trace_id), {"conv", "relu", "pool", "gemm"})
    # The child agent is stopped afterwards: its port no longer accepts connections.
    host, port = record.agent["address"].rsplit(":", 1)
    wait_for(lambda: not _accepts(host, int(port)), 30, "the child agent to stop")


def test_a_precision_mxnet_cannot_compute_in_is_one_clear_error(mxnet_python: Path, store) -> None:
    """Through the child agent of MXNet's own env: the error crosses gRPC with its type."""
    request = EvaluationRequest(
        model="digits_cnn", framework="mxnet", batch_sizes=[1], precision="fp16"
    )
    with pytest.raises(InvalidArgument, match=r"^--precision fp16: mxnet on cpu supports fp32$"):
        EmbeddedClient(store).evaluate(request, lambda _: None)


def test_mlms_agent_for_mxnet_runs_from_its_own_env(mxnet_python: Path, tmp_path: Path) -> None:
    agent = MlmsProcess.serving(["agent", "--framework", "mxnet"], tmp_path / "agent.log")
    try:
        with grpc.insecure_channel(agent.address()) as channel:
            reply = predictor_pb2_grpc.PredictorStub(channel).Info(
                predictor_pb2.InfoRequest(), timeout=120, wait_for_ready=True
            )
        assert reply.framework == "mxnet" and reply.framework_version == "1.9.1"
        assert "digits_cnn" in reply.models and "resnet50" in reply.models
        cmdline = Path(f"/proc/{agent.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[0].decode() == str(mxnet_python), (cmdline, agent.output())
    finally:
        agent.stop()


def test_missing_mxnet_env_is_one_clear_error(store, monkeypatch, tmp_path: Path) -> None:
    if own_interpreter("mxnet") is None:
        pytest.skip("MXNet imports in this environment")
    monkeypatch.setenv("MLMS_MXNET_PYTHON", str(tmp_path / "no-venv" / "bin" / "python"))
    request = EvaluationRequest(model="digits_cnn", framework="mxnet", iterations=1)
    with pytest.raises(UnsupportedFramework, match=r"does not exist; run scripts/setup.sh"):
        EmbeddedClient(store).evaluate(request)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def test_align_names_operators_and_bulks_by_graph_order() -> None:
    graph = [
        GraphNode("conv0", "Convolution", "conv", (8, 4, 4)),
        GraphNode("bn0", "BatchNorm", "batchnorm", (8, 4, 4)),
        GraphNode("relu0", "Activation", "relu", (8, 4, 4)),
        GraphNode("plus0", "elemwise_add", "add", (8, 4, 4)),
        GraphNode("pool0", "Pooling", "pool", (8, 1, 1)),
        GraphNode("dense0", "FullyConnected", "gemm", (10,)),
    ]
    ops = [
        OpEvent(BULK, 0, 10),  # ran conv0 inside
        OpEvent("BatchNorm", 10, 20),
        OpEvent("Activation", 20, 30),
        OpEvent("_copyto", 30, 31),  # not in the graph: keeps its own name
        OpEvent("elemwise_add", 31, 40),
        OpEvent(BULK, 40, 50),  # ran pool0 and dense0
    ]
    aligned = [(op.name, [n.name for n in nodes]) for op, nodes in align(ops, graph)]
    assert aligned == [
        (BULK, ["conv0"]),
        ("BatchNorm", ["bn0"]),
        ("Activation", ["relu0"]),
        ("_copyto", []),
        ("elemwise_add", ["plus0"]),
        (BULK, ["pool0", "dense0"]),
    ]


@pytest.mark.parametrize(
    ("op_type", "kind"),
    [
        ("Convolution", "conv"),
        ("FullyConnected", "gemm"),
        ("BatchNorm", "batchnorm"),
        ("Pooling", "pool"),
        ("elemwise_add", "add"),
        ("broadcast_add", "add"),
        ("Concat", "concat"),
        ("Flatten", "reshape"),
        ("Dropout", "dropout"),
        ("softmax", "softmax"),
        ("relu", "relu"),  # an Activation node's act_type
        ("clip", "activation"),  # Gluon's ReLU6
        ("Activation", "activation"),
    ],
)
def test_mxnet_op_types_normalise(op_type: str, kind: str) -> None:
    assert normalise_kind(op_type) == kind
