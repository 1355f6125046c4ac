#!/usr/bin/env bash
# Benanza's lower bounds on the lent GPU (the device tool), in one call: `mlms bound` for each
# model given at batch sizes 1 and 64, then the table of benchmarks/bounds_table.py. Run from
# the repository root there, with the wheels mlms needs beside the image's torch in .whl-bound/
# (carried: .whl-gpu's without plotly, plus nvidia-cudnn-frontend). The perfdb lives in
# .device-home/ (ignored, kept while the machine stays warm), so a second call reuses it:
#   benchmarks/bounds_gpu.sh OUT_DIR MODEL [MODEL ...]
set -uo pipefail
OUT=${1:?usage: benchmarks/bounds_gpu.sh OUT_DIR MODEL [MODEL ...]}
shift
mkdir -p "$OUT"
if [ ! -f /tmp/site/.done ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl-bound/*.whl && touch /tmp/site/.done || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD MLMS_HOME=$PWD/.device-home PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5 \
    MLMS_LOG_LEVEL=${MLMS_LOG_LEVEL:-info}
{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
    echo "cores: $(nproc)  python: $(python3 --version)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
    python3 -c "import torch, cudnn; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'frontend', cudnn.__version__)"
} 2>&1 | tee -a "$OUT/runs.txt"
n=0
for model in "$@"; do
    n=$((n + 1))
    name=$(printf "%02d-%s" "$n" "$model")  # a model given twice: the second is a perfdb hit
    start=$(date +%s.%N)
    timeout "${BOUND_TIMEOUT:-540}" python3 -m mlms bound --model "$model" --hw gpu \
        --batch-size "${BATCH_SIZES:-1,64}" --json > "$OUT/$name.json" 2> "$OUT/$name.err"
    rc=$?
    echo "$name rc=$rc seconds=$(python3 -c "import time; print(round(time.time() - $start, 1))")" \
        | tee -a "$OUT/runs.txt"
    # The log says, per layer config, the seconds spent setting up and timing: kept, compressed.
    if [ $rc -ne 0 ]; then tail -5 "$OUT/$name.err"; fi
    gzip -f "$OUT/$name.err"
done
python3 benchmarks/bounds_table.py "$OUT"/*.json | tee "$OUT/table.txt"
