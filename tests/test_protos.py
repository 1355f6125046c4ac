"""The checked-in generated code equals what grpcio-tools generates from protos/ now."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_protos.sh"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    fresh, checked_in = _files(tmp_path), _files(ROOT / "mlms" / "protos")
    assert sorted(fresh) == sorted(checked_in)
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not stale, f"regenerate with scripts/gen_protos.sh: {stale} differ"


def test_generated_code_imports_as_a_package() -> None:
    from mlms.protos.mlms.v2 import evaluator_pb2_grpc, predictor_pb2_grpc, types_pb2

    assert types_pb2.DESCRIPTOR.package == "mlms.v2"
    assert hasattr(evaluator_pb2_grpc, "EvaluatorServicer")
    assert hasattr(predictor_pb2_grpc, "PredictorServicer")


def test_open_inference_protocol_is_the_standard_service() -> None:
    """Triton's and KServe's clients call these paths: the package, service and method names
    are the protocol's, not ours to change."""
    from mlms.protos.inference import grpc_service_pb2

    service = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == "inference.GRPCInferenceService"
    methods = {method.name for method in service.methods}
    assert {
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelInfer",
        "ModelConfig",
        "ModelStatistics",
    } <= methods


#: Prints the serialized descriptors of tritonclient's compiled Triton protos, hex-encoded: in a
#: process of its own, since they register the same names as mlms's.
_TRITON_DESCRIPTORS = """
from tritonclient.grpc import model_config_pb2, service_pb2
print(model_config_pb2.DESCRIPTOR.serialized_pb.hex())
print(service_pb2.DESCRIPTOR.serialized_pb.hex())
"""


def test_triton_protos_are_the_descriptors_tritonclient_ships() -> None:
    """protos/inference/*.proto were written back from tritonclient's compiled descriptors:
    they must compile to those descriptors, but for the file names (ours sit under
    inference/)."""
    # Not importorskip: importing tritonclient here would clash with mlms's protos.
    if importlib.util.find_spec("tritonclient") is None:
        pytest.skip("tritonclient is not installed")
    from google.protobuf import descriptor_pb2

    from mlms.protos.inference import grpc_service_pb2, model_config_pb2

    printed = subprocess.run(
        [sys.executable, "-c", _TRITON_DESCRIPTORS], capture_output=True, text=True, check=True
    ).stdout.split()
    for ours, theirs in zip((model_config_pb2, grpc_service_pb2), printed, strict=True):
        mine = descriptor_pb2.FileDescriptorProto.FromString(ours.DESCRIPTOR.serialized_pb)
        upstream = descriptor_pb2.FileDescriptorProto.FromString(bytes.fromhex(theirs))
        assert mine.name == f"inference/{upstream.name}"
        assert list(mine.dependency) == [f"inference/{name}" for name in upstream.dependency]
        mine.name = upstream.name
        mine.ClearField("dependency")
        mine.dependency.extend(upstream.dependency)
        assert mine == upstream, upstream.name
