"""One agent per GPU: ``mlms agent --gpus all|0,1`` starts one worker per GPU, each pinned with
``CUDA_VISIBLE_DEVICES=<its UUID>`` and registered on its own (index and UUID) in a real etcd;
the parent restarts a worker that dies, ends with one line when one cannot start, and leaves
no process behind on SIGTERM or when it is killed outright; the server sends ``--hw h100:1``
to GPU 1's agent only.

The NVIDIA driver is faked at pynvml (``tests/fake_nvml``, first on the processes' PYTHONPATH:
a host of two H100s with an NVLink between them), because this suite runs on machines without
a GPU; the agents, etcd, the server and the dispatch are real. Nothing here runs a model on a
GPU: ``benchmarks/gpu_agents.py`` does, on a 2-GPU host.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.evaluation.record import EvaluationRequest
from mlms.registry.base import AgentRecord
from mlms.registry.factory import registry_from_url
from mlms.remote_client import RemoteClient
from mlms.rpc.payloads import evaluate_message
from tests.fake_gpus import child_env
from tests.processes import MlmsProcess, free_port, port_held, wait_for

H100 = "NVIDIA H100 80GB HBM3"
UUIDS = [f"GPU-7a3c1e52-90b4-4c1d-8e2f-00000000000{i}" for i in range(2)]
HOST = socket.gethostname()


def _records(url: str) -> list[AgentRecord]:
    registry = registry_from_url(url)
    try:
        values = registry.get_prefix("agents/").values()
    finally:
        registry.close()
    return [AgentRecord.model_validate_json(value) for value in values]


def _start(etcd, tmp_path: Path, *flags: str, home: Path | None = None) -> MlmsProcess:
    """``mlms agent --framework torch --gpus ...`` on the fake host, any free ports."""
    args = ["agent", "--framework", "torch", "--registry", etcd.url, "--ttl", "2",
            "--grace", "1", *flags]  # fmt: skip
    if "--listen" not in flags:
        args += ["--listen", "127.0.0.1:0", "--address-file", str(tmp_path / "agents.address")]
    env = child_env(MLMS_HOME=str(home or tmp_path / "home"))
    return MlmsProcess(args, tmp_path / "agents.log", env)


def _registered(etcd, process: MlmsProcess, count: int = 2) -> list[AgentRecord]:
    def ready() -> list[AgentRecord] | None:
        assert process.alive(), f"mlms agent --gpus ended:\n{process.output()}"
        records = _records(etcd.url)
        return records if len(records) == count else None

    return sorted(wait_for(ready, 120, f"{count} agents in etcd"), key=lambda r: r.gpus or [])


def _workers(process: MlmsProcess) -> list[psutil.Process]:
    return psutil.Process(process.pid).children()


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def test_one_agent_per_gpu_registers_restarts_and_stops(etcd, tmp_path: Path) -> None:
    parent = _start(etcd, tmp_path, "--gpus", "all")
    seen: list[int] = []
    try:
        records = _registered(etcd, parent)
        assert [r.gpus for r in records] == [[0], [1]]
        assert [[g.uuid for g in r.usable_gpus()] for r in records] == [[UUIDS[0]], [UUIDS[1]]]
        assert len({r.address for r in records}) == len({r.id for r in records}) == 2
        # The address file: one line per worker, in --gpus order, once all are registered.
        lines = wait_for(
            lambda: (
                (tmp_path / "agents.address").exists()
                and (tmp_path / "agents.address").read_text().split()
            ),
            30,
            "the address file",
        )
        assert lines == [r.address for r in records]
        workers = _workers(parent)
        seen += [w.pid for w in workers]
        pinned = sorted(w.environ()["CUDA_VISIBLE_DEVICES"] for w in workers)
        assert pinned == UUIDS
        # A worker that dies is started again, with the same GPU and a new registration.
        victim = next(w for w in workers if w.environ()["CUDA_VISIBLE_DEVICES"] == UUIDS[1])
        victim.kill()
        old = records[1].id
        again = wait_for(
            lambda: next((r for r in _records(etcd.url) if r.gpus == [1] and r.id != old), None),
            120,
            "GPU 1's agent registered again",
        )
        assert again.usable_gpus()[0].uuid == UUIDS[1] and parent.alive()
        seen += [w.pid for w in _workers(parent)]
    finally:
        code = parent.terminate(timeout=60)
        parent.stop()
    assert code == 0, parent.output()
    assert _gone(seen), parent.output()
    assert _records(etcd.url) == []  # each left the registry on its way out
    assert "gpu 1: " in parent.output()  # the workers' lines, each named by its GPU


def test_a_parent_killed_outright_takes_its_workers(etcd, tmp_path: Path) -> None:
    parent = _start(etcd, tmp_path, "--gpus", "0,1")
    try:
        _registered(etcd, parent)
        pids = [w.pid for w in _workers(parent)]
        assert len(pids) == 2
        parent.kill()  # SIGKILL: no chance to stop them itself
        wait_for(lambda: _gone(pids), 60, "the workers to end with their parent")
        wait_for(lambda: _records(etcd.url) == [], 30, "their registrations to go")
    finally:
        parent.stop()


def test_a_worker_that_cannot_start_ends_the_parent_with_one_line(etcd, tmp_path) -> None:
    port = free_port()
    with port_held(port):  # GPU 0's worker would serve on it
        parent = _start(etcd, tmp_path, "--gpus", "all", "--listen", f"127.0.0.1:{port}")
        try:
            parent.popen.wait(120)
        finally:
            parent.stop()
    lines = parent.output().strip().splitlines()
    assert parent.popen.returncode == 1
    assert lines[-1].startswith(
        f"mlms: error: the agent of GPU 0 {H100} ({UUIDS[0]}) exited (1) before it registered: "
        "mlms: error: "
    ), lines[-1]
    wait_for(lambda: _records(etcd.url) == [], 30, "GPU 1's agent to leave the registry")


@pytest.mark.parametrize(
    ("gpus", "host", "message"),
    [
        ("3", None, f"--gpus 3: host {HOST} has no GPU 3; it has 0 {H100}, 1 {H100}"),
        ("0,0", None, "--gpus 0,0: GPU 0 is named twice"),
        ("first", None, "--gpus 'first': expected all, or GPU indices as nvidia-smi numbers them"),
        ("all", {"gpus": []}, f"--gpus all: host {HOST} has no NVIDIA GPU (NVML lists none)"),
        ("0", {"gpus": []}, f"--gpus 0: host {HOST} has no GPU 0; it has no NVIDIA GPU"),
    ],
)
def test_gpus_the_host_lacks_is_one_line(tmp_path, gpus, host, message) -> None:
    env = child_env(MLMS_HOME=str(tmp_path))
    if host is not None:
        (tmp_path / "host.json").write_text(json.dumps(host))
        env["FAKE_NVML_HOST"] = str(tmp_path / "host.json")
    done = subprocess.run(
        [sys.executable, "-m", "mlms", "agent", "--framework", "torch", "--gpus", gpus,
         "--registry", "etcd://127.0.0.1:9"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    text = done.stderr.strip()
    assert text.startswith(f"mlms: error: {message}") and "\n" not in text, text


def test_gpus_needs_the_fleets_registry(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mlms", "agent", "--framework", "torch", "--gpus", "all"],
        capture_output=True, text=True, env=child_env(MLMS_HOME=str(tmp_path)), timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "mlms: error: --gpus with --registry memory://: each agent would register in a "
        "registry of its own process, where no server finds it; give the fleet's "
        "(etcd://HOST:PORT)"
    )


def _assigned(client: RemoteClient, hw: str) -> str:
    """The agent the server chooses for an evaluation on ``hw`` (the call is then dropped)."""
    request = EvaluationRequest(model="digits_cnn", framework="torch", hw=hw, iterations=1)
    call = client._stub.Evaluate(evaluate_message(request))
    try:
        for event in call:
            if event.WhichOneof("event") == "assigned":
                return event.assigned.agent_id
        raise AssertionError("no agent was assigned")
    finally:
        call.cancel()


def test_the_server_sends_an_index_to_that_gpus_agent_only(etcd, store, tmp_path) -> None:
    """Each call is dropped once assigned; the agent's evaluation then fails (no CUDA here).
    The session's store holds the model's asset already, so no agent builds it meanwhile."""
    AssetManager(store, mlms_home() / "cache").ensure(get_model("digits_cnn"), "torch")
    home = tmp_path / "home"
    shared = ["--store", str(store.root)]
    agents = _start(etcd, tmp_path, "--gpus", "all", *shared, home=home)
    server = MlmsProcess.serving(
        ["server", "--registry", etcd.url, "--grace", "1", *shared],
        tmp_path / "server.log",
        child_env(MLMS_HOME=str(home)),
    )
    try:
        by_gpu = {r.gpus[0]: r.id for r in _registered(etcd, agents)}
        with RemoteClient(server.address()) as client:
            wait_for(lambda: len(client.list_agents()) == 2, 60, "the server to see both")
            listed = {a.id: a for a in client.list_agents()}  # the gpus field over gRPC
            assert {i: listed[a].gpus for i, a in by_gpu.items()} == {0: [0], 1: [1]}
            for _ in range(3):
                assert _assigned(client, "h100:1") == by_gpu[1]
                assert _assigned(client, "gpu:0") == by_gpu[0]
            with pytest.raises(Exception, match=r"no agent with hardware 'h100:2'.*GPU 1"):
                _assigned(client, "h100:2")
        # mlms agents: a row per GPU agent, naming its GPU's index, name and UUID.
        listing = subprocess.run(
            [sys.executable, "-m", "mlms", "agents", "--server", server.address()],
            capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "300"},
        ).stdout  # fmt: skip
        for index, uuid in enumerate(UUIDS):
            assert f"{index} {H100} ({uuid})" in listing, listing
    finally:
        server.stop()
        agents.terminate(timeout=60)
        agents.stop()


def test_sigterm_during_start_leaves_nothing(etcd, tmp_path: Path) -> None:
    parent = _start(etcd, tmp_path, "--gpus", "all")
    try:
        wait_for(lambda: len(_workers(parent)) == 2, 60, "two workers")
        pids = [w.pid for w in _workers(parent)]
        parent.popen.send_signal(signal.SIGTERM)
        assert parent.popen.wait(60) == 0, parent.output()
    finally:
        parent.stop()
    assert _gone(pids)
    wait_for(lambda: _records(etcd.url) == [], 30, "no registration left")


_DIE_WITH_PARENT = (
    "import os; from mlms.agent.per_gpu import die_with_parent; die_with_parent(); "
    "print(os.environ.get('MLMS_AGENT_PARENT'))"
)


def test_a_worker_keeps_its_parents_pid_from_its_own_children() -> None:
    """A worker's children (a child agent, the power sampler) have the worker as parent: the
    variable naming the supervisor is gone from the environment they inherit."""
    env = {**os.environ, "MLMS_AGENT_PARENT": str(os.getpid())}
    done = subprocess.run([sys.executable, "-c", _DIE_WITH_PARENT], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, "None"), done.stderr
    env["MLMS_AGENT_PARENT"] = "1"  # not its parent: the supervisor is gone already
    done = subprocess.run([sys.executable, "-c", _DIE_WITH_PARENT], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1 and "the agent's parent 1 is gone" in done.stderr
