#!/usr/bin/env bash
# The analysis figures that need a GPU, in one call on the lent machine (the device tool):
#   1. a real hardware-level archive: resnet50, batch size 1, on the GPU;
#   2. `mlms analyze` on the recorded archive, on 2 cores;
#   3. a Kineto trace of the same work (torch.profiler, CPU + CUDA) for kineto_vs_hta.py,
#      and a small one (resnet18, 2 steps) for the tests;
#   4. the GPU tests;
#   5. benchmarks/analysis_scale.py on that archive, on 2 cores (taskset), as recorded and
#      repeated to 1,000,000 kernels (with the launching API calls, and with every call).
# Run from the repository root there, with the wheels mlms needs beside the image's torch in
# .whl-gpu/ (carried; benchmarks/RESULTS.md lists them):
#   [FULL_ITERATIONS=N] benchmarks/analysis_gpu.sh OUT_DIR [ITERATIONS] [KINETO_STEPS]
set -uo pipefail
OUT=${1:?usage: benchmarks/analysis_gpu.sh OUT_DIR [ITERATIONS] [KINETO_STEPS]}
ITERATIONS=${2:-300}
STEPS=${3:-300}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl-gpu/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD MLMS_HOME=/tmp/mlmshome PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "cores: $(nproc)  python: $(python3 --version)  commit: $(git rev-parse --short HEAD 2>/dev/null)"
    python3 -c "import torch, duckdb, pyarrow; print('torch', torch.__version__, 'duckdb', duckdb.__version__, 'pyarrow', pyarrow.__version__)"
} 2>&1 | tee "$OUT/env.txt"

echo "== 1. resnet50 bs 1, --trace-level hardware, $ITERATIONS iterations" | tee "$OUT/analysis.txt"
python3 -m mlms eval --model resnet50 --hw h100 --batch-size 1 --trace-level hardware \
    --iterations "$ITERATIONS" --min-seconds 0 --json > "$OUT/record.json" 2> /tmp/eval.err \
    || { tail -5 /tmp/eval.err; exit 1; }
ID=$(python3 -c "import json,sys; print(json.load(open('$OUT/record.json'))['id'])")
TRACE=$(python3 -c "import json,sys; print(json.load(open('$OUT/record.json'))['trace_id'])")
ARCHIVE=$MLMS_HOME/store/traces/$TRACE/spans.parquet
cp "$ARCHIVE" "$OUT/spans.parquet"  # for a report made elsewhere (about 10 MB)
python3 - "$ARCHIVE" <<'EOF' 2>&1 | tee -a "$OUT/analysis.txt"
import sys, duckdb
path = sys.argv[1]
print(duckdb.sql(f"SELECT count(*) AS spans, count(*) FILTER (WHERE kind = 'kernel') AS kernels, "
                 f"count(*) FILTER (WHERE level = 5) AS api_calls FROM '{path}'"))
EOF

echo "== 2. mlms analyze on 2 cores" | tee -a "$OUT/analysis.txt"
python3 - "$ID" "$OUT/analyze.txt" <<'EOF' 2>&1 | tee -a "$OUT/analysis.txt"
import resource, subprocess, sys, time
started = time.perf_counter()
with open(sys.argv[2], "w") as output:
    subprocess.run(["taskset", "-c", "0,1", sys.executable, "-m", "mlms", "analyze", sys.argv[1]],
                   stdout=output, check=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"mlms analyze: {time.perf_counter() - started:.2f} s wall, peak RSS {peak:.0f} MB")
EOF

echo "== 3. Kineto traces (torch.profiler, CPU + CUDA; KINETO_STEPS=$STEPS, 0: none)" | tee -a "$OUT/analysis.txt"
[ "$STEPS" -gt 0 ] && python3 - "$OUT" "$STEPS" <<'EOF' 2>&1 | tee -a "$OUT/analysis.txt"
import gzip, os, shutil, sys, time
import torch, torchvision
out, steps = sys.argv[1], int(sys.argv[2])

def trace(name, model_name, n, path):
    model = torchvision.models.get_model(model_name, weights=None).eval().cuda()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    with torch.inference_mode():
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as profiler:
            for _ in range(n):
                model(x)
                torch.cuda.synchronize()
                profiler.step()
    raw = path.removesuffix(".gz")
    started = time.perf_counter()
    profiler.export_chrome_trace(raw)
    with open(raw, "rb") as source, gzip.open(path, "wb", compresslevel=6) as target:
        shutil.copyfileobj(source, target)
    os.remove(raw)
    print(f"{name}: {n} steps of {model_name}, {os.path.getsize(path) / 1e6:.1f} MB gz "
          f"(export {time.perf_counter() - started:.1f} s)")

trace("small", "resnet18", 2, f"{out}/kineto_resnet18_h100.json.gz")
trace("large", "resnet50", steps, f"{out}/kineto_resnet50_h100.json.gz")
EOF

echo "== 4. GPU tests" | tee -a "$OUT/analysis.txt"
timeout "${GPU_TESTS_TIMEOUT:-240}" python3 -m pytest tests/test_gpu.py tests/test_cupti_join.py \
    tests/test_kernel_analyses.py tests/test_layer_costs.py tests/test_kineto_import.py \
    -q -rs -p no:cacheprovider 2>&1 | tail -15 | tee "$OUT/gpu_tests.txt"

echo "== 5. analysis_scale on 2 cores" | tee -a "$OUT/analysis.txt"
KERNELS=$(python3 -c "import duckdb; print(duckdb.sql(\"SELECT count(*) FROM '$ARCHIVE' WHERE kind = 'kernel'\").fetchall()[0][0])")
for args in "--kernels $KERNELS --api all" "--kernels 1000000 --api launches" "--kernels 1000000 --api all"; do
    echo "-- $args" | tee -a "$OUT/analysis.txt"
    taskset -c 0,1 python3 benchmarks/analysis_scale.py --archive "$ARCHIVE" $args 2>&1 | tee -a "$OUT/analysis.txt"
done

# 6. With FULL_ITERATIONS set: resnet50 at batch sizes 1 and 16 traced at full (ncu counters),
#    its record and archive brought back for a report with rooflines.
if [ "${FULL_ITERATIONS:-0}" -gt 0 ]; then
    echo "== 6. resnet50 bs 1,16, --trace-level full, $FULL_ITERATIONS iterations" | tee -a "$OUT/analysis.txt"
    python3 -m mlms eval --model resnet50 --hw h100 --batch-size 1,16 --trace-level full \
        --iterations "$FULL_ITERATIONS" --min-seconds 0 --json > "$OUT/record_full.json" \
        2> /tmp/eval_full.err || tail -5 /tmp/eval_full.err
    FULL_TRACE=$(python3 -c "import json; print(json.load(open('$OUT/record_full.json'))['trace_id'])")
    cp "$MLMS_HOME/store/traces/$FULL_TRACE/spans.parquet" "$OUT/spans_full.parquet"
    ls -la "$OUT/spans_full.parquet" | tee -a "$OUT/analysis.txt"
fi
