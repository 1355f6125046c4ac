"""The checked-in generated code equals what grpcio-tools generates from protos/ now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    from mlms.protos.inference import grpc_predict_v2_pb2

    service = grpc_predict_v2_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == "inference.GRPCInferenceService"
    methods = {method.name for method in service.methods}
    assert {
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelInfer",
    } <= methods
