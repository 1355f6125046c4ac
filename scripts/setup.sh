#!/usr/bin/env bash
# Set up mlms on a fresh machine (Debian/Ubuntu, Python 3.11): the virtualenv with every
# framework that installs beside the others, and the services the tests start on loopback.
# Idempotent: a second run only checks, and upgrades what has a newer release in its range.
# Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv

# Debian packages as root (with an index refresh if the first try fails); returns 1 when this
# is not root with apt-get (the caller says what will skip); a failed install ends the setup.
apt_install() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null \
        || { apt-get update -q >/dev/null && \
             DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; } \
        || { echo "setup: apt-get could not install $*" >&2; exit 1; }
}

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
# One resolution for the main environment: torch 2.14.1 + torchvision 0.29.1 (the pair that
# imports together here, see README), ONNX Runtime, tensorflow-cpu 2.21 (it installs beside
# torch, onnxruntime and protobuf 7), JAX (CPU; Keras runs on it in a process of its own), the
# test tools, and grpcio-tools pinned to the version
# that generated mlms/protos (tests/test_protos.py regenerates the code and compares).
# Eager upgrades: every library at the newest release of pyproject.toml's range, also in a
# virtualenv made before that release (the suite runs on the newest; README, "Tested versions").
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    --upgrade --upgrade-strategy eager \
    "torch==2.14.1" "torchvision==0.29.1" \
    -e ".[torch,onnxruntime,tensorflow,jax,test,protos]"
# KerasHub, the maintained Keras 3 home of BERT and GPT-2 (the zoo's TensorFlow transformers),
# without its declared tensorflow-text: every tensorflow-text 2.21 wheel requires the full
# tensorflow wheel, which would install a second TensorFlow over tensorflow-cpu, and the
# backbones mlms builds never import it (so `pip check` names that one requirement missing).
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "keras-hub==0.32.0"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "sentencepiece==0.2.3" "kagglehub>=0.3,!=1.0.1" "kagglesdk==0.1.28"

# --- Fleet infrastructure: etcd and S3 for the registry and store tests -----------
# The Python side (etcd3gw, minio; moto[s3], flask, flask-cors for the test S3 server) comes
# with the pyproject dependencies installed above. The etcd server is Debian's etcd-server
# (it serves the /v3 HTTP gateway); tests start the binary themselves, since systemd does not
# run in containers. Without root it is skipped with a message and the etcd tests skip.
if command -v etcd >/dev/null 2>&1; then
    :
elif apt_install etcd-server; then
    # The package enables a systemd unit; stop it where systemd runs so port 2379 stays free.
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
        systemctl disable --now etcd >/dev/null 2>&1 || true
    fi
else
    echo "setup: etcd is not installed and this is not root with apt-get:" \
        "run 'apt-get install -y etcd-server' as root (or set MLMS_ETCD_BIN); etcd tests will skip"
fi
"$VENV/bin/python" -c "import etcd3gw, minio, moto, flask, flask_cors" \
    || { echo "setup: the fleet's Python packages did not install" >&2; exit 1; }
# --- end fleet infrastructure ----------------------------------------------------------------

# --- PostgreSQL for the evaluation index's tests (tests/postgres.py starts Debian's server in a
# temp folder, as the postgres user when run as root). The package enables a cluster that
# systemd starts where it runs: stopped, so the tests' own server is the only one.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    if apt_install postgresql; then
        if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet postgresql 2>/dev/null; then
            systemctl disable --now postgresql >/dev/null 2>&1 || true
        fi
    else
        echo "setup: PostgreSQL is not installed and this is not root with apt-get:" \
            "run 'apt-get install -y postgresql' as root; the PostgreSQL tests will skip"
    fi
fi
"$VENV/bin/python" -c "import sqlalchemy, alembic, psycopg" \
    || { echo "setup: the evaluation index's Python packages did not install" >&2; exit 1; }
# --- end PostgreSQL ------------------------------------------------------------------------

# --- The report's browser tests: Debian's chromium, driven by playwright's Python API ------
# tests/test_report.py opens reports in /usr/bin/chromium (never a browser that playwright
# downloads). Without root it is skipped with a message and those tests skip.
if [ -x /usr/bin/chromium ]; then
    :
elif ! apt_install chromium; then
    echo "setup: chromium is not installed and this is not root with apt-get:" \
        "run 'apt-get install -y chromium' as root; the report's browser tests will skip"
fi
"$VENV/bin/python" -c "import playwright.sync_api" \
    || { echo "setup: playwright did not install in $VENV" >&2; exit 1; }
# --- end browser ---------------------------------------------------------------------------

# --- Network-namespace hosts: tests/test_multihost.py and benchmarks/chaos.py use `ip netns`
# and veth pairs (iproute2), as root. Without them those tests skip with the reason.
if ! command -v ip >/dev/null 2>&1 && ! apt_install iproute2; then
    echo "setup: iproute2 is not installed and this is not root with apt-get:" \
        "the network-namespace tests will skip"
fi
# --- end network namespaces ------------------------------------------------------------------

# --- MXNet ------------------------------------------------------------------------
# mxnet 1.9.1 imports only with numpy 1.23.5, so it gets its own virtualenv, .venv-mxnet, with
# mlms but without torch; `mlms agent --framework mxnet` and the embedded
# `mlms eval --framework mxnet` run from it (mlms/frameworks.py names it).
MXNET_VENV=.venv-mxnet
if [ ! -x "$MXNET_VENV/bin/python" ]; then
    "$PY" -m venv "$MXNET_VENV"
fi
"$MXNET_VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[mxnet]"
"$MXNET_VENV/bin/python" -c "import mxnet, numpy; assert numpy.__version__ == '1.23.5'" \
    || { echo "setup: mxnet did not install in $MXNET_VENV" >&2; exit 1; }
# --- end MXNet -----------------------------------------------------------------------------

echo "setup: done ($("$VENV/bin/python" --version), $("$VENV/bin/python" -m pip --version | cut -d' ' -f2) pip)"
