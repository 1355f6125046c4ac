#!/usr/bin/env bash
# Set up mlms on a fresh machine (Debian/Ubuntu, Python 3.11): the virtualenv with every
# framework that installs beside the others, and the services the tests start on loopback.
# Idempotent: a second run only checks. Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
# torch 2.14.1 + torchvision 0.29.1 are the pair that import together here (see README).
"$VENV/bin/pip" install -q --disable-pip-version-check \
    "torch==2.14.1" "torchvision==0.29.1" \
    -e ".[torch,onnxruntime,test]"
# Distributed platform (issue 3): grpcio-tools, pinned to the version that generated
# mlms/protos, so that tests/test_protos.py can regenerate the code and compare.
"$VENV/bin/pip" install -q --disable-pip-version-check -e ".[protos]"

echo "setup: done ($("$VENV/bin/python" --version), $("$VENV/bin/pip" --version | cut -d' ' -f2) pip)"
