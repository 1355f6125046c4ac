#!/usr/bin/env bash
# A model split over the two GPUs of a lent 2-GPU host (the device tool's nvidia-h100-x2, which
# may come as nvidia-h200-x2), in one call: benchmarks/tensor_parallel_gpu.py's tables (mlms
# against a bare torch loop with the same split, NCCL kernel time against torch.profiler, one
# GPU against two, --generate) and the bare loop's Kineto traces, one per rank.
#
# Run from the repository root there. The image has torch, transformers and pyarrow (Python
# 3.12) but not mlms's other pure-Python dependencies nor CUPTI's Python bindings: the wheels
# come carried in .whl-tp/ (ignored), made here with
#   python3 -m pip download -d .whl-tp --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 --platform any pydantic==2.14.4 pydantic_core==2.50.5 \
#       annotated_types==0.8.0 typing_extensions==4.16.0 typing_inspection==0.4.5 \
#       duckdb==2.0.1 cxxfilt==0.3.0 pyelftools==0.33 importlib_metadata==10.2.0 zipp==4.1.2 \
#       opentelemetry_api==1.45.2 opentelemetry_sdk==1.45.2 \
#       opentelemetry_semantic_conventions==0.66b2 cupti-python==13.4.0
# NVLink multicast stays off in every process (NCCL, PyTorch's symmetric memory, NVSHMEM): the
# host's GPUs are shared with others. The device tool's call:
#   run(command="benchmarks/tensor_parallel_gpu.sh $OUT", carry=[".whl-tp"],
#       kind="nvidia-h100-x2", timeout_s=600)
# All three parts of the split tinyllama_1b take longer than one call's 10 minutes on two H200s
# (the host-bound split runs 75-135 ms a forward): give each part a call of its own, e.g.
#   TP_GPU_TIMEOUT=560 benchmarks/tensor_parallel_gpu.sh $OUT --parts nccl
#   benchmarks/tensor_parallel_gpu.sh OUT_DIR [--dry] [--parts latency,nccl,scaling]
set -uo pipefail
OUT=${1:?usage: benchmarks/tensor_parallel_gpu.sh OUT_DIR [tensor_parallel_gpu.py options]}
shift
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5 USE_TF=0 TF_CPP_MIN_LOG_LEVEL=3 \
    MLMS_HOME=${MLMS_HOME:-/tmp/mlms-tp}
if [ "${1:-}" = "--dry" ]; then
    PY=${PYTHON:-.venv/bin/python}
else
    PY=python3
    command -v nvidia-smi > /dev/null || { echo "tensor_parallel_gpu.sh: no nvidia-smi: not a GPU machine"; exit 2; }
    if [ ! -f /tmp/site-tp/.done ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site-tp .whl-tp/*.whl && touch /tmp/site-tp/.done || exit 1
    fi
    export PYTHONPATH=/tmp/site-tp:$PWD
    {
        nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
        nvidia-smi topo -m
        echo "cores: $(nproc)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
        python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'transformers', transformers.__version__)"
    } 2>&1 | tee "$OUT/env.txt"
fi
timeout "${TP_GPU_TIMEOUT:-570}" "$PY" benchmarks/tensor_parallel_gpu.py --out "$OUT" "$@" \
    2> "$OUT/stderr.txt" | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "tensor_parallel_gpu.py rc=$rc"; grep -v "Warning\|warn(" "$OUT/stderr.txt" | tail -25; }
exit "$rc"
