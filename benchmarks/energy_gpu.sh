#!/usr/bin/env bash
# Energy per inference on the lent H100 (the device tool), in one call of about 6 minutes:
# benchmarks/energy_check.py (resnet50 at batch 1, 16, 64, 256 and BERT-base at 32 x 512, fp32
# and fp16, inputs on the device: mlms's joules against NVML's counter read by a sidecar process,
# p50 with and without energy collection, interleaved), then the energy test of tests/test_gpu.py.
# Prints the table and writes it under OUT_DIR.
#
# Run from the repository root there. The image has torch 2.11 (Python 3.12) but neither
# transformers (BERT-base is built from its configuration) nor mlms's own pure-Python
# dependencies: the wheels come carried in .whl-energy/ (ignored), made here with
#   mkdir -p .whl-energy && cp /work/main/.whl-tf/*.whl .whl-energy/   # transformers_gpu.sh's set
#   .venv/bin/pip download -d .whl-energy --no-deps nvidia-ml-py==13.615.71
# The device tool's call:
#   run(command="benchmarks/energy_gpu.sh $OUT", carry=[".whl-energy"], timeout_s=600)
#   benchmarks/energy_gpu.sh OUT_DIR [energy_check.py options]
set -uo pipefail
OUT=${1:?usage: benchmarks/energy_gpu.sh OUT_DIR [energy_check.py options]}
shift
mkdir -p "$OUT"
command -v nvidia-smi > /dev/null || { echo "energy_gpu.sh: no nvidia-smi: not a GPU machine"; exit 2; }
if [ ! -f /tmp/site-energy/.done ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site-energy .whl-energy/*.whl && touch /tmp/site-energy/.done || exit 1
fi
export PYTHONPATH=/tmp/site-energy:$PWD MLMS_HOME=$PWD/.device-home PYTHONUNBUFFERED=1 \
    KINETO_LOG_LEVEL=5 USE_TF=0
{
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm \
        --format=csv,noheader
    echo "cores: $(nproc)  python: $(python3 --version)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
    python3 -c "import torch, pynvml; pynvml.nvmlInit(); print('torch', torch.__version__, \
        'cuda', torch.version.cuda, 'nvml', pynvml.nvmlSystemGetNVMLVersion())"
} 2>&1 | tee "$OUT/env.txt"
timeout "${ENERGY_CHECK_TIMEOUT:-390}" python3 benchmarks/energy_check.py --out "$OUT" "$@" \
    2> "$OUT/stderr.txt" | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "energy_check.py rc=$rc"; tail -20 "$OUT/stderr.txt"; }
timeout "${GPU_TESTS_TIMEOUT:-60}" python3 -m pytest tests/test_gpu.py -k energy -q -rs \
    -p no:cacheprovider -p no:randomly 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt"
exit "$rc"
