#!/usr/bin/env bash
# Energy per inference on the lent H100 (the device tool), in one call of about 6 minutes:
# benchmarks/energy_check.py (resnet50 at batch 1, 16, 64, 256 and BERT-base at 32 x 512, fp32
# and fp16, inputs on the device: mlms's joules against NVML's counter read by a sidecar process,
# p50 with and without energy collection, interleaved), then the energy test of tests/test_gpu.py.
# Prints the table and writes it under OUT_DIR.
#
# Run from the repository root there. The image has torch 2.11 and transformers 5.17 with its
# tokenizers, huggingface_hub and safetensors (Python 3.12; /work/shared/gpu-image.txt), in
# mlms's range, so they are used as they are (BERT-base is built from its configuration); mlms's
# own pure-Python dependencies come carried in .whl-energy/ (ignored), made here for Python 3.12
# (cryptography, cffi and pycparser for tests/fixtures_services; plotly and narwhals, the
# report's, left out for size):
#   .venv/bin/pip download -d .whl-energy --no-deps --python-version 3.12 --only-binary=:all: \
#       pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 \
#       typing_extensions==4.16.0 typing_inspection==0.4.5 duckdb==2.0.1 cxxfilt==0.3.0 \
#       pyelftools==0.33 importlib_metadata==10.2.0 zipp==4.1.2 opentelemetry_api==1.45.2 \
#       opentelemetry_sdk==1.45.2 opentelemetry_semantic_conventions==0.66b2 \
#       nvidia-ml-py==13.615.71 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
# The device tool's call (/tmp/site-energy removed first: a dist-info of an older wheel left
# there from an earlier call shadows the new one's):
#   run(command="rm -rf /tmp/site-energy; ENERGY_CHECK_TIMEOUT=500 GPU_TESTS_TIMEOUT=60 \
#       benchmarks/energy_gpu.sh $OUT --min-seconds 5 --rounds 2", carry=[".whl-energy"])
#   benchmarks/energy_gpu.sh OUT_DIR [energy_check.py options, e.g. --configs --rounds]
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
