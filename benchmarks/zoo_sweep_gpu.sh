#!/usr/bin/env bash
# The zoo's characterization sweep on the lent GPU (the device tool), in one call of at most
# 240 s wall: `mlms sweep` of as much of the zoo as fits, torch, model level, batch sizes
# 1, 4, 16 and 64 (powers of two, every other one, capped at 64 for the budget:
# ZOO_BATCH_SIZES changes them), the models in the order of zoo_sweep_order.py (one of each
# family and task first, the largest last, so that a cut sweep still covers every task);
# then `mlms site` over it. The assets (seeded weights) are built ahead of the sweep by
# background `mlms assets` workers on the CPU cores while the GPU measures. Prints the sweep's
# table; writes under OUT_DIR:
#   env.txt, sweep.txt (the table), sweep_id.txt, zoo_sweep_store.tar.gz (the store's records,
#   sweep state and span archives, the model assets left out), site/ (the results site),
#   stderr.txt
#
# Run from the repository root there. The image has torch 2.11, torchvision 0.26, transformers
# 5.17 and timm 1.0.29 (Python 3.12; /work/shared/gpu-image.txt), in mlms's ranges, used as they
# are; mlms's pure-Python dependencies come carried in .whl-gpu/, those of
# benchmarks/energy_gpu.sh's header and plotly==7.1.0 and narwhals==2.29.0 (the site's plots). The sweep runs torch only:
# ONNX Runtime's GPU build is not in the image.
#   run(command="rm -rf /tmp/site-zoo; benchmarks/zoo_sweep_gpu.sh $OUT", carry=[".whl-gpu"])
#   benchmarks/zoo_sweep_gpu.sh OUT_DIR          the GPU run (240 s)
#   benchmarks/zoo_sweep_gpu.sh OUT_DIR --dry    on this CPU: three small models, batch 1 and 2
set -uo pipefail
OUT=${1:?usage: benchmarks/zoo_sweep_gpu.sh OUT_DIR [--dry]}
DRY=${2:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BEGAN=$SECONDS
export MLMS_HOME=${ZOO_HOME:-/tmp/zoo-sweep-home} PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5 USE_TF=0
rm -rf "$MLMS_HOME"
if [ "$DRY" = "--dry" ]; then
    PY=${PYTHON:-.venv/bin/python}
    export PYTHONPATH=$PWD
    HW=cpu BATCHES=${ZOO_BATCH_SIZES:-1,2} ITERATIONS=2 WARMUP=1 MIN_SECONDS=0
    SWEEP_S=${ZOO_SWEEP_TIMEOUT:-400} WORKERS=1
    MODELS=${ZOO_MODELS:-digits_cnn,ssdlite320_mobilenet_v3,distilbert_base}
else
    PY=python3
    command -v nvidia-smi > /dev/null || { echo "zoo_sweep_gpu.sh: no nvidia-smi: not a GPU machine"; exit 2; }
    if [ ! -f /tmp/site-zoo/.done ]; then
        timeout 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/site-zoo .whl-gpu/*.whl && touch /tmp/site-zoo/.done || exit 1
    fi
    export PYTHONPATH=/tmp/site-zoo:$PWD
    # The records name the card (h100, h200) where mlms knows it.
    HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h100|h200' \
        | head -1 | tr '[:upper:]' '[:lower:]')
    HW=${HW:-gpu} BATCHES=${ZOO_BATCH_SIZES:-1,4,16,64} ITERATIONS=10 WARMUP=3 MIN_SECONDS=0.2
    # 240 s in all: what the install left, less about 50 s for the table, archive and site.
    SWEEP_S=${ZOO_SWEEP_TIMEOUT:-$((190 - (SECONDS - BEGAN)))} WORKERS=${ZOO_ASSET_WORKERS:-6}
    MODELS=${ZOO_MODELS:-$(timeout 30 python3 benchmarks/zoo_sweep_order.py)}
fi
MLMS=("$PY" -m mlms)
{
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
        --format=csv,noheader
    echo "cores: $(nproc)  python: $("$PY" --version)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
    echo "batch sizes: $BATCHES  iterations: $ITERATIONS  warmup: $WARMUP  min seconds: $MIN_SECONDS"
    echo "models ($(tr ',' '\n' <<< "$MODELS" | wc -l), in sweep order): $MODELS"
} 2>&1 | tee "$OUT/env.txt"

# Assets ahead of the sweep: worker i builds models i, i+W, ... in sweep order (the store's lock
# makes the sweep wait for a build in progress rather than build it twice).
IFS=, read -r -a LIST <<< "$MODELS"
BUILDERS=()
for ((w = 0; w < WORKERS; w++)); do
    args=()
    for ((i = w; i < ${#LIST[@]}; i += WORKERS)); do args+=(-m "${LIST[i]}"); done
    OMP_NUM_THREADS=2 timeout "$SWEEP_S" "${MLMS[@]}" assets -f torch "${args[@]}" \
        > /dev/null 2>> "$OUT/assets_stderr.txt" &
    BUILDERS+=($!)
done

# SIGINT: the sweep stops as after Ctrl-C; its completed cells are stored already.
timeout -s INT -k 10 "$SWEEP_S" "${MLMS[@]}" sweep -m "$MODELS" -f torch -b "$BATCHES" --hw "$HW" \
    -n "$ITERATIONS" --warmup "$WARMUP" --min-seconds "$MIN_SECONDS" \
    > "$OUT/sweep.txt" 2> "$OUT/stderr.txt"
rc=$?
for pid in "${BUILDERS[@]}"; do kill "$pid" 2> /dev/null; done
wait 2> /dev/null
SWEEP_ID=$(ls "$MLMS_HOME/store/sweeps" 2> /dev/null | head -1 | sed 's/\.json$//')
echo "$SWEEP_ID" > "$OUT/sweep_id.txt"
echo "sweep ${SWEEP_ID:-none}: rc=$rc after $((SECONDS - BEGAN)) s"
if [ -z "$SWEEP_ID" ]; then
    tail -20 "$OUT/stderr.txt"
    exit 1
fi
timeout 30 "$PY" benchmarks/zoo_sweep_order.py --table "$MLMS_HOME/store/sweeps/$SWEEP_ID.json" \
    | tee "$OUT/sweep_table.txt"
tar -czf "$OUT/zoo_sweep_store.tar.gz" -C "$MLMS_HOME/store" --exclude=./models .
timeout 40 "${MLMS[@]}" site "$SWEEP_ID" -o "$OUT/site" 2>&1 | tail -3
site_rc=${PIPESTATUS[0]}
echo "site rc=$site_rc, $(du -sh "$OUT/site" 2> /dev/null | cut -f1); store archive" \
    "$(du -h "$OUT/zoo_sweep_store.tar.gz" | cut -f1); total $((SECONDS - BEGAN)) s"
[ "$site_rc" -eq 0 ] || exit "$site_rc"
