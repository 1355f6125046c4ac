#!/usr/bin/env bash
# mlms advise against an exhaustive sweep of the same space on the lent H100 (--hw gpu: the first
# GPU, so an H200 serves too), in about 100 s:
# resnet50, throughput objective, torch at fp32, fp16 and bf16, channels-last on and off,
# batch sizes 1, 32 and 128 (18 configurations, one evaluation each in the sweep), through
# benchmarks/advise_check.py. Prints its table and writes it under OUT_DIR.
#
# Run from the repository root there, with mlms's pure-Python wheels carried in .whl-gpu/ (the
# set benchmarks/energy_gpu.sh's header lists; plotly is not needed):
#   run(command="benchmarks/advise_gpu.sh $OUT", carry=[".whl-gpu"])
# Dry mode on a CPU machine (the repository's .venv; digits_cnn, a tiny space, a few seconds
# of measurement) checks the script itself:
#   benchmarks/advise_gpu.sh /tmp/advise-dry --dry   (MLMS_HOME: a store with digits_cnn built)
# The hard budget is ADVISE_GPU_TIMEOUT seconds (default 110) for the whole check.
set -uo pipefail
OUT=${1:?usage: benchmarks/advise_gpu.sh OUT_DIR [--dry]}
MODE=${2:-gpu}
mkdir -p "$OUT"
if [ "$MODE" = "--dry" ]; then
    PY=${PYTHON:-.venv/bin/python}
    export PYTHONPATH=$PWD MLMS_HOME=${MLMS_HOME:-$OUT/home} PYTHONUNBUFFERED=1
    ARGS=(--models digits_cnn --hw cpu --objective throughput --frameworks torch
          --precisions fp32,bf16 --compile none --threads 2 --batch-sizes 1,4
          --iterations 3 --min-seconds 0.05 --probe-iterations 3 --probe-min-seconds 0.02
          --verify 2 --budget-minutes 1)
else
    command -v nvidia-smi > /dev/null || { echo "advise_gpu.sh: no nvidia-smi: not a GPU machine"; exit 2; }
    PY=python3
    if [ ! -f /tmp/site/.done ]; then
        timeout 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/site .whl-gpu/*.whl && touch /tmp/site/.done || exit 1
    fi
    export PYTHONPATH=/tmp/site:$PWD MLMS_HOME=$PWD/.device-home PYTHONUNBUFFERED=1 \
        KINETO_LOG_LEVEL=5 USE_TF=0
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
        2>&1 | tee "$OUT/env.txt"
    ARGS=(--models resnet50 --hw gpu --objective throughput --frameworks torch
          --precisions fp32,fp16,bf16 --compile none --batch-sizes 1,32,128
          --iterations 20 --min-seconds 0.5 --probe-iterations 5 --probe-min-seconds 0.1
          --verify 2 --budget-minutes 1)
fi
echo "commit: $(git rev-parse --short HEAD 2>/dev/null)" | tee -a "$OUT/env.txt"
timeout "${ADVISE_GPU_TIMEOUT:-110}" "$PY" benchmarks/advise_check.py --out "$OUT" "${ARGS[@]}" \
    2> "$OUT/stderr.txt" | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "advise_check.py rc=$rc"; tail -20 "$OUT/stderr.txt"; }
exit "$rc"
