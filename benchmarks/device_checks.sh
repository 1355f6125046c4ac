#!/usr/bin/env bash
# The checks of a session on the lent GPU machine (the device tool), in one call:
# benchmarks/dispatch_overhead.py on that machine's 16 cores with the fleet as deployed (a real
# etcd, an agent and a server process), then the GPU tests at this commit. Run from the
# repository root there, with the Python wheels mlms needs beside the image's torch in .whl/
# and an etcd binary in .etcd/ (both carried; benchmarks/RESULTS.md lists them):
#   benchmarks/device_checks.sh OUT_DIR
set -uo pipefail
OUT=${1:?usage: benchmarks/device_checks.sh OUT_DIR}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD MLMS_HOME=/tmp/mlmshome MLMS_ETCD_BIN=$PWD/.etcd/etcd \
    PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "cores: $(nproc)  python: $(python3 --version)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
    python3 -c "import torch, grpc, google.protobuf as p; print('torch', torch.__version__, 'grpcio', grpc.__version__, 'protobuf', p.__version__)"
} 2>&1 | tee "$OUT/env.txt"
python3 benchmarks/dispatch_overhead.py 2>&1 | tee "$OUT/dispatch_overhead.txt"
timeout "${GPU_TESTS_TIMEOUT:-300}" python3 -m pytest tests/test_gpu.py tests/test_cupti_join.py \
    tests/test_kernel_analyses.py -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.txt"
