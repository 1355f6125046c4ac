#!/usr/bin/env bash
# HTA (holistictraceanalysis) in its own virtualenv, .venv-hta, for benchmarks/kineto_vs_hta.py.
# HTA 0.5 predates pandas 3 and numpy 2.3, which .venv holds, so it never goes into .venv.
# Idempotent: a second run only checks. Usage: benchmarks/setup_hta.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-hta

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import hta.trace_analysis" 2>/dev/null; then
    "$VENV/bin/pip" install -q --disable-pip-version-check \
        "holistictraceanalysis==0.5.0" "pandas==2.2.3" "numpy==1.26.4"
fi
"$VENV/bin/python" -c "import hta.trace_analysis" && echo "setup_hta: $VENV ready"
