"""TensorFlow and torch's compiler stack never share a process (``mlms.isolation``).

With TensorFlow loaded, anything that loads torch's Triton (torch.profiler, torch.export, an
optimizer) kills the process with SIGSEGV. mlms runs TensorFlow in an agent of its own and
builds assets in a process of their own, so every order of frameworks works.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlms.errors import AssetError, UnknownModel
from mlms.isolation import call_in_own_process
from mlms.tracer.archive import read_spans
from mlms.tracer.levels import TraceLevel

# Loaded by nothing in mlms or its tests, so its presence tells which process imported it.
PROBE_MODULE = "wave"


def _import_probe_and_double(value: int) -> tuple[int, int, bool]:
    __import__(PROBE_MODULE)
    return value * 2, os.getpid(), PROBE_MODULE in sys.modules


def _raise_unknown_model() -> None:
    raise UnknownModel("unknown model 'resnet5'; did you mean resnet50?")


def _count_to(n: int, *, tell) -> str:
    for i in range(1, n + 1):
        tell(("step", i))
    return "done"


def _leave_a_temporary_file() -> str:
    """What a library's exit handler would delete (TensorFlow's autograph modules)."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".py", delete=False) as left:
        return left.name


def _die_by_signal() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_call_returns_the_value_from_a_process_whose_imports_stay_there() -> None:
    assert PROBE_MODULE not in sys.modules
    doubled, pid, imported = call_in_own_process(_import_probe_and_double, 21, what="a probe")
    assert (doubled, imported) == (42, True)
    assert pid != os.getpid()
    assert PROBE_MODULE not in sys.modules


def test_an_error_in_the_child_is_raised_here_as_itself() -> None:
    with pytest.raises(UnknownModel, match="did you mean resnet50"):
        call_in_own_process(_raise_unknown_model, what="a failing call")


def test_notes_told_in_the_child_arrive_here_in_order_before_the_answer() -> None:
    notes = []
    assert call_in_own_process(_count_to, 3, what="a counter", on_note=notes.append) == "done"
    assert notes == [("step", 1), ("step", 2), ("step", 3)]


def test_the_temporary_files_a_child_leaves_go_with_it(tmp_path, monkeypatch) -> None:
    """A child ends without its exit handlers: what it left in its temporary folder (its own,
    inside this process's) is removed once it has ended, with the folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    left = Path(call_in_own_process(_leave_a_temporary_file, what="a leaver"))
    assert left.parent.parent == tmp_path and left.parent.name.startswith("mlms-child-")
    assert not left.exists() and not list(tmp_path.glob("mlms-child-*"))


def test_a_child_that_dies_without_answering_is_one_clear_error() -> None:
    with pytest.raises(AssetError, match=r"^a doomed builder ended with signal SIGKILL"):
        call_in_own_process(_die_by_signal, what="a doomed builder", error=AssetError)


def test_compare_tensorflow_first_then_torch_profiles_in_one_command(store, tmp_path) -> None:
    """The order that crashed: TensorFlow evaluated first, then torch at the framework level
    (torch.profiler loads Triton) and ONNX Runtime, all from one ``mlms compare``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlms",
            "compare",
            "--model",
            "digits_cnn",
            "--frameworks",
            "tensorflow,torch,onnxruntime",
            "--batch-size",
            "1",
            "--iterations",
            "2",
            "--warmup",
            "1",
            "--min-seconds",
            "0",
            "--trace-level",
            "framework",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(done.stdout)
    assert [r["framework"]["name"] for r in records] == ["tensorflow", "torch", "onnxruntime"]
    for record in records:
        spans = read_spans(store, record["trace_id"])
        assert (spans["level"] == int(TraceLevel.FRAMEWORK)).sum() > 0, record["framework"]
    assert len({record["trace_id"] for record in records}) == 3


_BOUND_IN_A_TENSORFLOW_PROCESS = """
import json, sys
import tensorflow  # what a TensorFlow agent holds once it has served an evaluation
from mlms.bounds.record import BoundRequest
from mlms.agent.child import evaluate_in_child
from mlms.bounds.run import bound
from mlms.store.factory import default_store
steps = []
record = bound(
    BoundRequest(model="digits_cnn", framework="tensorflow", repeats=3, iterations=2,
                 min_seconds=0),
    store=default_store(),
    step=steps.append,
    apart=evaluate_in_child,
)
print(json.dumps({"framework": record.framework, "evaluation": record.batches[0].evaluation_id,
                  "steps": steps}))
"""


def test_a_bound_in_a_process_holding_tensorflow_measures_it_elsewhere(store) -> None:
    """A TensorFlow agent asked for a bound: torch's graph and profiler cannot run beside the
    TensorFlow it holds, so the bound runs in a process of its own (steps still reported), and
    the measurement in a TensorFlow agent of its own."""
    done = subprocess.run(
        [sys.executable, "-c", _BOUND_IN_A_TENSORFLOW_PROCESS],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["framework"] == "tensorflow"
    assert result["steps"][0].startswith("this process holds tensorflow: the bound runs in")
    assert any(step.startswith("measuring digits_cnn") for step in result["steps"])
    assert store.exists(f"evaluations/{result['evaluation']}.json")


def test_the_fork_servers_preload_leaves_out_a_module_that_fails_to_load(
    tmp_path, monkeypatch
) -> None:
    """multiprocessing's own preload stops the server on any error but an ImportError, which
    would fail every call; a module whose native part fails to load (OSError) is left out."""
    from mlms.isolation_preload import preload

    (tmp_path / "broken_native_library.py").write_text("raise OSError('libbroken.so: bad ELF')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert preload(["broken_native_library", "json", "no_such_module_anywhere"]) == ["json"]


def test_a_child_agent_binds_its_own_port_and_says_which(store) -> None:
    """The child picks a free port itself (``--listen 127.0.0.1:0``) and writes where it serves
    to a file of its parent's, so no other process can take the port between the two."""
    import grpc

    from mlms.agent.child import child_agent
    from mlms.protos.mlms.v2 import predictor_pb2, predictor_pb2_grpc

    with child_agent(Path(sys.executable), "onnxruntime", store) as address:
        host, port = address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        with grpc.insecure_channel(address) as channel:
            info = predictor_pb2_grpc.PredictorStub(channel).Info(
                predictor_pb2.InfoRequest(), timeout=30
            )
        assert (info.framework, info.address) == ("onnxruntime", address)
