"""Frameworks that run apart from the caller's process, in an agent of their own.

MXNet 1.9 needs numpy 1.23, so it lives in its own virtualenv (the framework table names it);
TensorFlow imports here but must not share a process with torch's compiler stack
(``mlms.isolation``), so its agent runs on this interpreter. The embedded client evaluates such
a framework by starting ``mlms agent`` with that interpreter on a free loopback port, streaming
the evaluation over the agent's gRPC ``Evaluate`` and stopping the agent afterwards; the agent
shares this process's store (and MLMS_HOME), so the record and the span archive land where an
in-process evaluation would put them. ``mlms agent`` started for a framework of another
virtualenv from the main environment replaces itself with the same command under the
framework's interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from opentelemetry import context as otel_context

from mlms.assets.manager import AssetManager
from mlms.catalog.resolve import resolve_model
from mlms.config import mlms_home
from mlms.errors import Unavailable, UnsupportedFramework
from mlms.evaluation.progress import ProgressCallback
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.frameworks import own_interpreter, runs_apart
from mlms.manifest import ModelManifest
from mlms.protos.mlms.v2 import predictor_pb2_grpc
from mlms.rpc.options import CHANNEL_OPTIONS
from mlms.rpc.payloads import evaluate_message, record_from_events
from mlms.rpc.propagation import outgoing_metadata
from mlms.rpc.status import error_from_rpc
from mlms.store.base import ObjectStore

#: An agent imports its framework and registers within seconds; a cold disk cache may be slow.
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.05  # how often the starting child's address file is looked for


def interpreter_for(framework: str) -> Path:
    """The interpreter of the framework's child agent (its own virtualenv's, or this one for a
    framework that only needs a process of its own); a clear error when its virtualenv is
    missing."""
    python = own_interpreter(framework)
    if python is None:
        if runs_apart(framework):
            return Path(sys.executable)
        raise UnsupportedFramework(f"framework {framework!r} imports here; it needs no child agent")
    if not python.exists():
        raise UnsupportedFramework(
            f"framework {framework!r} runs from its own virtualenv, but {python} does not exist; "
            "run scripts/setup.sh to create it"
        )
    return python


def exec_in_own_interpreter(framework: str) -> None:
    """Replace this process with the same ``mlms`` command under the framework's interpreter,
    when the framework does not import here; return otherwise."""
    if own_interpreter(framework) is None:
        return
    python = str(interpreter_for(framework))
    os.execv(python, [python, "-m", "mlms", *sys.argv[1:]])


def evaluate_in_child(
    request: EvaluationRequest,
    store: ObjectStore,
    progress: ProgressCallback | None = None,
    parent: otel_context.Context | None = None,
    evaluation_id: str | None = None,
    manifest: ModelManifest | None = None,
) -> EvaluationRecord:
    """Run ``request`` on a child agent of its framework; the record it stored. The
    evaluation's spans join the trace of the span current in ``parent``, if any. ``manifest``:
    the request's model, where the caller has resolved it already."""
    framework = request.framework or ""
    python = interpreter_for(framework)
    model = manifest or resolve_model(request.model, store, input_shapes=request.input_shapes)
    # Assets are exported from the canonical torch module, which only this side may have.
    AssetManager(store, mlms_home() / "cache").ensure(model, framework)
    with child_agent(python, framework, store) as address:
        peer = f"{framework} agent at {address} ({python})"
        with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            stub = predictor_pb2_grpc.PredictorStub(channel)
            try:
                events = stub.Evaluate(
                    evaluate_message(request, evaluation_id or ""),
                    metadata=outgoing_metadata(parent) if parent is not None else None,
                )
                return record_from_events(events, progress, peer, EvaluationRecord)
            except grpc.RpcError as exc:
                raise error_from_rpc(exc, peer) from exc


@contextmanager
def child_agent(python: Path, framework: str, store: ObjectStore) -> Iterator[str]:
    """An ``mlms agent`` for ``framework`` run by ``python`` on loopback; yields its address.

    It registers only in its own in-memory registry: nothing outside this process finds it. It
    binds a free port itself and writes its address to a file of this process's: a port picked
    here could be taken by another process while the child starts."""
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryFile() as log:
        address_file = Path(folder) / "address"
        command = [
            str(python),
            "-m",
            "mlms",
            "agent",
            "--framework",
            framework,
            "--listen",
            "127.0.0.1:0",
            "--address-file",
            str(address_file),
            "--registry",
            "memory://",
            "--store",
            store.url,
            "--grace",
            "1",
        ]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield _wait_ready(process, address_file, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(process: subprocess.Popen, address_file: Path, log) -> str:
    """The agent's address, once it has written it; fail with its last output line if it exits
    first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not address_file.exists():
        if process.poll() is not None:
            log.seek(0)
            lines = log.read().decode(errors="replace").strip().splitlines() or ["no output"]
            raise Unavailable(
                f"the child agent ({' '.join(process.args[:5])}) exited with status "
                f"{process.returncode}: {lines[-1]}"
            )
        if time.monotonic() > deadline:
            raise Unavailable(
                f"the child agent ({' '.join(process.args[:5])}) did not start serving within "
                f"{START_TIMEOUT_S:.0f}s"
            )
        time.sleep(POLL_S)
    return address_file.read_text()
