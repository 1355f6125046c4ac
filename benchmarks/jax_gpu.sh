#!/usr/bin/env bash
# JAX on the lent H100 in one call of at most 150 s (JAX_GPU_BUDGET): resnet50 on --framework
# jax (Keras 3 on JAX, strict fp32: JAX's "highest" matmul precision), batch 64, inputs on the
# device:
#   1. benchmarks/jax_gpu.py: mlms's p50 against a bare jax.jit loop with block_until_ready,
#      interleaved in one process (target <= 1.02); the layer capture (XLA's kernels joined to
#      the compiled HLO's op_name metadata): share of each predict's kernel time on layers
#      (target >= 95 %), kernels, spans and fused spans a predict, GPU time per layer type,
#      kernels named TF32 (strict fp32: none);
#   2. with the time left: mlms compare --frameworks torch,jax at batch 1, 16 and 64 (-t
#      framework, inputs on the device, fp32 in both);
#   3. the GPU tests of the jax predictor (tests/test_jax.py -m gpu), if time is left.
# Prints the tables and writes them under OUT_DIR (env.txt, jax_table.txt, jax_results.json,
# compare.txt, gpu_tests.txt).
#
# Run from the repository root there. The image has Python 3.12, torch 2.11 and JAX 0.11 with
# its CUDA plugin, not Keras: its wheels come carried in .whl-gpu/ with mlms's pure-Python
# dependencies (benchmarks/energy_gpu.sh's header lists those), and, for step 2 (jax runs in a
# child agent: gRPC), grpcio and its kin, made here for Python 3.12 (17 MB):
#   .venv/bin/pip download -d .whl-gpu --no-deps --python-version 3.12 --only-binary=:all: \
#       keras==3.15.1 namex==0.1.0 optree==0.20.0 h5py==3.14.0 absl-py==2.5.1 rich==15.0.0 \
#       markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 grpcio==1.85.3 \
#       grpcio-health-checking==1.85.1 grpcio-reflection==1.85.1 protobuf==7.36.2 \
#       googleapis-common-protos==1.76.0 opentelemetry-exporter-otlp-proto-grpc==1.45.2 \
#       opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-proto==1.45.2
# (step 2's chart needs matplotlib; without it the table still prints, the chart fails).
# The device tool's call:
#   run(command="benchmarks/jax_gpu.sh $OUT", carry=[".whl-gpu"])
# On a CPU machine, `benchmarks/jax_gpu.sh OUT_DIR --dry` runs every step with the main
# virtualenv on the CPU, on digits_cnn at small batches, to check the script itself.
set -uo pipefail
OUT=${1:?usage: benchmarks/jax_gpu.sh OUT_DIR [--dry]}
DRY=${2:-}
BUDGET=${JAX_GPU_BUDGET:-150}
START=$(date +%s)
mkdir -p "$OUT"
left() { echo $((BUDGET - ($(date +%s) - START))); }

if [ "$DRY" = "--dry" ]; then
    PY=.venv/bin/python
    export PYTHONPATH=$PWD MLMS_HOME=${MLMS_HOME:-/tmp/mlms-jax-dry}
    MODEL=digits_cnn BATCH=4 DEVICE=cpu HW=cpu BATCHES=1,4 ON_DEVICE=""
    BENCH_ARGS="--rounds 2 --block 5 --layer-predicts 3"
else
    command -v nvidia-smi > /dev/null || { echo "jax_gpu.sh: no nvidia-smi: not a GPU machine"; exit 2; }
    PY=python3
    if [ ! -f /tmp/site-gpu/.done ]; then
        timeout 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/site-gpu .whl-gpu/*.whl && touch /tmp/site-gpu/.done \
            || { echo "jax_gpu.sh: the wheels of .whl-gpu did not install"; exit 1; }
    fi
    export PYTHONPATH=/tmp/site-gpu:$PWD MLMS_HOME=$PWD/.device-home
    MODEL=resnet50 BATCH=64 DEVICE=cuda:0 HW=${GPU_HW:-gpu} BATCHES=1,16,64 ON_DEVICE=--input-on-device
    BENCH_ARGS="--rounds 6 --block 20 --layer-predicts 10"
fi
# Every process allocates what it uses (XLA's default takes 75 % of the GPU up front, which a
# torch process beside it, or the asset builder's JAX, would then lack).
export PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5 USE_TF=0 TF_CPP_MIN_LOG_LEVEL=2 \
    XLA_PYTHON_CLIENT_PREALLOCATE=false
{
    if [ -z "$DRY" ]; then
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
    fi
    echo "cores: $(nproc)  python: $($PY --version)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
    timeout 30 $PY -c "import jax, keras, torch; print('jax', jax.__version__, jax.devices(), \
        'keras', keras.__version__, 'torch', torch.__version__)"
} 2>&1 | grep -v "^WARNING: All log\|^I0000" | tee "$OUT/env.txt"

echo "== 1. $MODEL on jax, batch $BATCH, $DEVICE: mlms vs bare jit; layer join" | tee "$OUT/jax_table.txt"
# shellcheck disable=SC2086
timeout $(( $(left) > 110 ? 110 : $(left) - 5 )) $PY benchmarks/jax_gpu.py --out "$OUT" \
    --model "$MODEL" --batch-size "$BATCH" --device "$DEVICE" $BENCH_ARGS \
    2> "$OUT/jax_stderr.txt" | tee -a "$OUT/jax_table.txt.tmp"
rc=${PIPESTATUS[0]}
[ -f "$OUT/jax_table.txt.tmp" ] && cat "$OUT/jax_table.txt.tmp" >> "$OUT/jax_table.txt"
rm -f "$OUT/jax_table.txt.tmp"
[ "$rc" -eq 0 ] || { echo "jax_gpu.py rc=$rc"; grep -v "^I0000\|^WARNING" "$OUT/jax_stderr.txt" | tail -15; }

if [ "$(left)" -gt 35 ]; then
    echo "== 2. mlms compare --frameworks torch,jax, batch $BATCHES ($(left) s left)" \
        | tee "$OUT/compare.txt"
    # shellcheck disable=SC2086
    timeout $(( $(left) - 10 )) $PY -m mlms compare --model "$MODEL" --frameworks torch,jax \
        --hw "$HW" --batch-size "$BATCHES" -t framework --precision fp32 $ON_DEVICE \
        --iterations 30 --min-seconds 0 --plot "$OUT/compare.png" 2> "$OUT/compare_stderr.txt" \
        | tee -a "$OUT/compare.txt"
    crc=${PIPESTATUS[0]}
    [ "$crc" -eq 0 ] || { echo "compare rc=$crc"; grep -v "^I0000\|^WARNING" "$OUT/compare_stderr.txt" | tail -8; }
else
    echo "== 2. compare skipped: $(left) s left" | tee "$OUT/compare.txt"
fi

if [ -z "$DRY" ] && [ "$(left)" -gt 12 ]; then
    timeout $(( $(left) - 3 )) $PY -m pytest tests/test_jax.py -m gpu -q -rs -p no:cacheprovider \
        -p no:randomly -n 0 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt"
fi
echo "jax_gpu.sh: $(( $(date +%s) - START )) s of $BUDGET"
exit "$rc"
