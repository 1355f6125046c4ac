#!/usr/bin/env bash
# Generate the Python code for protos/mlms/v*/*.proto and protos/inference/*.proto (the Open
# Inference Protocol, served by every agent beside its own API) into mlms/protos/ (checked in;
# tests/test_protos.py proves it equals a fresh generation). Usage: scripts/gen_protos.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-mlms/protos}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
for version in protos/mlms/v*/; do
    v=$(basename "$version")
    "$PY" -m grpc_tools.protoc -I protos \
        --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
        "$version"*.proto
    # protoc writes imports relative to the proto root ("from mlms.v2 import ..."); the code
    # lives in the package mlms.protos, so make them absolute there.
    sed -i -E "s/^from mlms\.$v import/from mlms.protos.mlms.$v import/" \
        "$OUT/mlms/$v/"*_pb2.py "$OUT/mlms/$v/"*_pb2_grpc.py "$OUT/mlms/$v/"*.pyi
    for package in "$OUT" "$OUT/mlms" "$OUT/mlms/$v"; do
        [ -f "$package/__init__.py" ] || : > "$package/__init__.py"
    done
done
"$PY" -m grpc_tools.protoc -I protos \
    --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
    protos/inference/*.proto
# grpc_service.proto imports model_config.proto: the same absolute imports as above.
sed -i -E 's/^from inference import/from mlms.protos.inference import/' \
    "$OUT"/inference/*_pb2.py "$OUT"/inference/*_pb2_grpc.py "$OUT"/inference/*.pyi
[ -f "$OUT/inference/__init__.py" ] || : > "$OUT/inference/__init__.py"
