#!/usr/bin/env bash
# GPU pipeline and transformer numbers on the lent H100 (the device tool), in one call:
# resnet50 batch 64 fp32 with --input-on-device against a bare torch loop timed with CUDA
# events (target: within 2%),
# the pinned input copy's GB/s (target: >= 20) against a pageable one, and BERT-base and GPT-2
# small at fp32/tf32/fp16/bf16 (speed-up over fp32; GPT-2's time to first token and per output
# token); benchmarks/transformers_gpu.py prints the tables and writes them under OUT_DIR.
#
# Run from the repository root there. The image has torch 2.11 and transformers 5.17 (Python
# 3.12; /work/shared/gpu-image.txt), in mlms's range, so they are used as they are (no model
# is downloaded: the networks are built from their configurations); mlms's own dependencies
# come carried in .whl-tf/ (ignored), made here with
#   mkdir -p .whl-tf && cp .whl-gpu/{annotated_types,cxxfilt,duckdb,opentelemetry,pydantic,\
#       pyelftools,typing}*.whl .whl-tf/
# The device tool's call:
#   run(command="benchmarks/transformers_gpu.sh $OUT", carry=[".whl-tf"], timeout_s=600)
#   benchmarks/transformers_gpu.sh OUT_DIR [--parts harness,pinned,transformers] [...]
set -uo pipefail
OUT=${1:?usage: benchmarks/transformers_gpu.sh OUT_DIR [transformers_gpu.py options]}
shift
mkdir -p "$OUT"
if [ ! -f /tmp/site-tf/.done ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site-tf .whl-tf/*.whl && touch /tmp/site-tf/.done || exit 1
fi
export PYTHONPATH=/tmp/site-tf:$PWD MLMS_HOME=$PWD/.device-home PYTHONUNBUFFERED=1 \
    KINETO_LOG_LEVEL=5 USE_TF=0
{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
    echo "cores: $(nproc)  python: $(python3 --version)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/env.txt"
timeout "${TRANSFORMERS_GPU_TIMEOUT:-560}" python3 benchmarks/transformers_gpu.py --out "$OUT" "$@" \
    2> "$OUT/stderr.txt" | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "transformers_gpu.py rc=$rc"; tail -20 "$OUT/stderr.txt"; }
exit "$rc"
