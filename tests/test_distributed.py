"""The fleet as an operator runs it: a real etcd, S3 over HTTP (moto's server), one
``mlms server`` and three ``mlms agent`` processes on loopback, and an in-process OTLP
receiver. Nothing is faked; the models are small (digits_cnn) and the runs short."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pytest

from mlms import errors
from mlms.analysis.engine import Spans
from mlms.analysis.layers import layer_table, layer_types, slowest_layers
from mlms.client import EmbeddedClient
from mlms.evaluation.query import EvaluationQuery
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.summary import EvaluationSummary
from mlms.protos.mlms.v2 import (
    calls_pb2,
    evaluation_pb2,
    evaluator_pb2,
    evaluator_pb2_grpc,
    types_pb2,
)
from mlms.registry.factory import registry_from_url
from mlms.remote_client import RemoteClient
from mlms.rpc import tensors
from mlms.rpc.options import MAX_MESSAGE_BYTES
from mlms.server.jobs import Job
from mlms.store.factory import store_from_url
from mlms.tracer.levels import TraceLevel
from tests.otlp_receiver import Receiver
from tests.processes import MlmsProcess, free_port, wait_for
from tests.shared_assets import copy_asset

TTL = 2.0
AGENTS = 3


@dataclass
class Fleet:
    env: dict[str, str]
    logs: Path
    registry_url: str
    store_url: str
    receiver: Receiver
    server: MlmsProcess | None = None
    address: str = ""
    agents: dict[str, MlmsProcess] = field(default_factory=dict)  # by address
    _started: int = 0  # processes started so far: each logs to a file of its own

    def start_agent(self) -> str:
        """A torch agent, serving; its address."""
        return self.serving(self.launch_agent())

    def launch_agent(self) -> MlmsProcess:
        """A torch agent process, not waited for (``serving``)."""
        self._started += 1
        return MlmsProcess.serving(
            ["agent", "--framework", "torch", "--grace", "2"],
            self.logs / f"agent-{self._started}.log",
            self.env,
        )

    def serving(self, process: MlmsProcess) -> str:
        """The address of an agent from ``launch_agent`` once it serves; it joins ``agents``."""
        try:
            address = process.address()
        except AssertionError:
            process.stop()
            raise
        self.agents[address] = process
        return address

    def start_server(self) -> tuple[MlmsProcess, str]:
        """A server on a port of its own, serving, and its address."""
        self._started += 1
        process = MlmsProcess.serving(
            ["server", "--grace", "2"], self.logs / f"server-{self._started}.log", self.env
        )
        try:
            return process, process.address()
        except AssertionError:
            process.stop()
            raise

    def client(self, address: str | None = None) -> RemoteClient:
        return RemoteClient(address or self.address, otlp_endpoint=self.receiver.endpoint)

    def registered(self) -> set[str]:
        """Addresses of the agents in the registry, read straight from etcd."""
        registry = registry_from_url(self.registry_url)
        try:
            return {
                json.loads(value)["address"] for value in registry.get_prefix("agents/").values()
            }
        finally:
            registry.close()

    def live(self) -> set[str]:
        return {a for a, p in self.agents.items() if p.alive()}

    def logs_text(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text()[-3000:]}" for p in self.logs.glob("*.log"))


@pytest.fixture(scope="module")
def fleet(etcd, s3, store, tmp_path_factory) -> Iterator[Fleet]:
    home = tmp_path_factory.mktemp("fleet_home")
    logs = tmp_path_factory.mktemp("fleet_logs")
    receiver = Receiver()
    env = {
        **s3.env,
        "MLMS_HOME": str(home),
        "MLMS_REGISTRY": etcd.url,
        "MLMS_STORE": s3.url,
        "MLMS_TTL": str(TTL),
        "MLMS_OTLP_ENDPOINT": receiver.endpoint,
    }
    # The asset in place before they start, so that three agents do not race to build it.
    copy_asset(store, store_from_url(s3.url), "digits_cnn", "torch")
    fleet = Fleet(env, logs, etcd.url, s3.url, receiver)
    launched = [fleet.launch_agent() for _ in range(AGENTS)]  # the server starts while they do
    client = None
    try:
        fleet.server, fleet.address = fleet.start_server()
        for process in launched:
            fleet.serving(process)
        client = fleet.client()
        wait_for(lambda: len(_agents(client)) == AGENTS, 90, f"{AGENTS} agents at the server")
        yield fleet
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{fleet.logs_text()}") from None
    finally:
        if client is not None:
            client.close()
        every = {id(p): p for p in [fleet.server, *launched, *fleet.agents.values()] if p}
        for process in every.values():
            process.stop()
        receiver.stop()


def _agents(client: RemoteClient) -> list:
    try:
        return client.list_agents()
    except errors.Unavailable:
        return []


def _request(**changes) -> EvaluationRequest:
    values = {
        "model": "digits_cnn",
        "framework": "torch",
        "batch_sizes": [1, 2],
        "iterations": 4,
        "warmup": 1,
        "min_seconds": 0.0,
    }
    return EvaluationRequest(**(values | changes))


class Background:
    """A long evaluation on a thread of its own; ``measuring`` is set once past its warm-up."""

    def __init__(self, fleet: Fleet, address: str | None, *, min_seconds: float) -> None:
        self.measuring = threading.Event()
        self.outcome: EvaluationRecord | BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fleet, address, min_seconds))

    def _run(self, fleet: Fleet, address: str | None, min_seconds: float) -> None:
        try:
            with fleet.client(address) as client:
                self.outcome = client.evaluate(
                    _request(batch_sizes=[1], iterations=10, min_seconds=min_seconds),
                    lambda event: self.measuring.set() if event.run != "warmup" else None,
                )
        except BaseException as exc:
            self.outcome = exc


def test_remote_eval_matches_embedded(fleet: Fleet) -> None:
    request = _request()
    embedded = EmbeddedClient().evaluate(request)
    with fleet.client() as client:
        remote = client.evaluate(request)
        assert client.get_evaluation(remote.id[:12]) == remote
        # Indexed by the server as it relayed the record: listed at once, newest first.
        listing = client.list_evaluations(EvaluationQuery(model=request.model, page_size=1))
        assert [s.id for s in listing.summaries] == [remote.id]
        assert listing.summaries[0] == EvaluationSummary.of(remote)
    assert set(remote.model_dump()) == set(embedded.model_dump())
    same = ("request", "model", "framework", "device", "trace_level", "span_count", "accuracy")
    for name in same:
        assert getattr(remote, name) == getattr(embedded, name), name
    assert [(r.batch_size, r.iterations) for r in remote.results] == [
        (r.batch_size, r.iterations) for r in embedded.results
    ]
    assert remote.agent["mode"] == "remote" and remote.agent["address"] in fleet.agents
    assert embedded.agent == {"mode": "embedded"}


def test_cli_against_the_server(fleet: Fleet, tmp_path: Path) -> None:
    env = {**fleet.env, "MLMS_SERVER": fleet.address}
    shown = _mlms(
        "eval", "-m", "digits_cnn", "-b", "1", "-n", "3", "--min-seconds", "0", "--json", env=env
    )
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["agent"]["mode"] == "remote"
    agents = _mlms("agents", env=env)
    assert agents.returncode == 0, agents.stderr
    for address in fleet.live():
        assert address in agents.stdout
    assert "torch" in agents.stdout and "cpu" in agents.stdout
    assert "resnet50" in _mlms("models", env=env).stdout
    assert record["id"][:12] in _mlms("evals", env=env).stdout
    analysis = _mlms("analyze", record["id"][:12], env=env)
    assert analysis.returncode == 0 and "latency vs batch size" in analysis.stdout
    out = tmp_path / "spans.parquet"
    exported = _mlms(
        "trace", "export", record["id"], "--format", "parquet", "-o", str(out), env=env
    )
    assert exported.returncode == 0, exported.stderr
    import pyarrow.parquet as pq

    assert pq.ParquetFile(out).read().num_rows == record["span_count"]
    page = tmp_path / "report.html"
    reported = _mlms("report", record["id"][:12], "-o", str(page), env=env)
    assert reported.returncode == 0, reported.stderr
    assert record["id"] in page.read_text()


def test_cli_errors_are_one_line(fleet: Fleet) -> None:
    env = {**fleet.env, "MLMS_SERVER": fleet.address}
    _one_line(
        _mlms("models", env={**env, "MLMS_SERVER": f"127.0.0.1:{free_port()}"}),
        "cannot reach mlms server at 127.0.0.1:",
    )
    _one_line(_mlms("eval", "-m", "resnet5", env=env), "unknown model 'resnet5'")
    _one_line(
        _mlms("eval", "-m", "digits_cnn", "--hw", "v100", env=env),
        "no agent with hardware 'v100'",
        "the fleet has cpu (",
    )


def test_one_trace_from_client_to_layers(fleet: Fleet) -> None:
    with fleet.client() as client:
        record = client.evaluate(_request(trace_level="framework", batch_sizes=[2]))
        archive = client.spans(record.trace_id)
        assert client.last_trace_id == record.trace_id
    layer_rows = archive.filter(pc.field("level") == int(TraceLevel.FRAMEWORK)).num_rows
    assert layer_rows > 0

    def complete():
        spans = fleet.receiver.of_trace(record.trace_id)
        layers = [s for s in spans if s.attributes.get("mlms.level") == int(TraceLevel.FRAMEWORK)]
        return spans if len(layers) >= layer_rows else None

    spans = wait_for(complete, 20, "the layer spans at the OTLP receiver")
    services = {s.service for s in spans}
    assert {"mlms-client", "mlms-server", "mlms-agent", "mlms"} <= services
    names = {s.name for s in spans}
    assert {"client.evaluate", "server.evaluate", "agent.evaluate", "evaluation", "model"} <= names
    layers = [s for s in spans if s.attributes.get("mlms.level") == int(TraceLevel.FRAMEWORK)]
    assert len(layers) == layer_rows  # none dropped on the way, none doubled
    by_id = {s.span_id: s for s in spans}
    root = next(s for s in spans if s.name == "evaluation")
    chain = []
    span = root
    while span is not None:
        chain.append(span.name)
        span = by_id.get(span.parent_id)
    assert chain == ["evaluation", "agent.evaluate", "server.evaluate", "client.evaluate"]


def test_bad_inputs_over_grpc(fleet: Fleet) -> None:
    channel = grpc.insecure_channel(fleet.address, options=[("grpc.max_send_message_length", -1)])
    stub = evaluator_pb2_grpc.EvaluatorStub(channel)

    def status(call) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as caught:
            call()
        return caught.value.code(), caught.value.details()

    def evaluate(**fields):
        spec = evaluation_pb2.EvaluationSpec(**fields)
        return lambda: list(stub.Evaluate(calls_pb2.EvaluateRequest(spec=spec)))

    code, details = status(evaluate(model="resnet5"))
    assert code == grpc.StatusCode.NOT_FOUND and "unknown model 'resnet5'" in details
    code, details = status(evaluate(model="digits_cnn", batch_sizes=[0]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "batch sizes must be positive" in details
    code, details = status(evaluate(model="digits_cnn", trace_level=9))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("bad evaluation request: trace_level: unknown TraceLevel 9")
    spec = types_pb2.ModelSpec(model="digits_cnn", framework="torch", hw="cpu")
    garbage = types_pb2.Tensor(data=b"\xff" * 10, shape=[1, 1, 8, 8], dtype="float32")
    code, details = status(
        lambda: stub.Predict(calls_pb2.PredictRequest(spec=spec, tensor=garbage), timeout=120)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "tensor data is 10 bytes, but shape [1, 1, 8, 8] of float32 needs 256"
    big = types_pb2.Tensor(data=bytes(MAX_MESSAGE_BYTES), shape=[MAX_MESSAGE_BYTES], dtype="uint8")
    code, details = status(lambda: stub.Predict(calls_pb2.PredictRequest(spec=spec, tensor=big)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    code, details = status(lambda: stub.GetEvaluation(evaluator_pb2.GetEvaluationRequest()))
    assert code == grpc.StatusCode.NOT_FOUND or code == grpc.StatusCode.INVALID_ARGUMENT
    query = evaluation_pb2.EvaluationQuery(sweep_id="../etc")
    listing = evaluator_pb2.ListEvaluationsRequest(query=query)
    code, details = status(lambda: stub.ListEvaluations(listing))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "bad evaluation query: sweep_id: sweep id '../etc': expected 32 hex digits"
    # Still serving, and a good predict goes through the same route.
    batch = np.zeros((2, 1, 8, 8), np.float32)
    with fleet.client() as client:
        reply = client.predict(
            calls_pb2.PredictRequest(spec=spec, tensor=tensors.to_proto(batch), top_k=1)
        )
        assert reply.agent_id in {a.id for a in client.list_agents()}
    assert tensors.from_proto(reply.logits).shape == (2, 10) and len(reply.top) == 2
    assert stub.ListModels(evaluator_pb2.ListModelsRequest()).manifests
    channel.close()


def test_analyses_are_computed_at_the_server(fleet: Fleet) -> None:
    """``Analyze`` runs the named analyses next to the store (S3 here) and sends Arrow tables:
    the same tables as the engine computes from the archive the client fetches itself."""
    names = ["layer_table", "slowest_layers", "layer_types"]
    with fleet.client() as client:
        record = client.evaluate(_request(trace_level="framework", batch_sizes=[1, 2]))
        tables = client.analyze([record.id[:12]], names, top=2)
        local = Spans.from_tables([client.spans(record.trace_id)])
    assert set(tables) == set(names)
    expected = {
        "layer_table": layer_table(local),
        "slowest_layers": slowest_layers(local, 2),
        "layer_types": layer_types(local),
    }
    for name in names:
        pd.testing.assert_frame_equal(tables[name], expected[name], check_dtype=False)
    assert len(tables["slowest_layers"]) == 2 * 2  # two per batch size
    assert set(tables["layer_table"]["trace_id"]) == {record.trace_id}

    channel = grpc.insecure_channel(fleet.address)
    stub = evaluator_pb2_grpc.EvaluatorStub(channel)

    def status(request) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Analyze(request, timeout=60))
        return caught.value.code(), caught.value.details()

    code, details = status(
        evaluator_pb2.AnalyzeRequest(evaluation_ids=[record.id], analyses=["layer_tabel"])
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("unknown analysis 'layer_tabel': expected one of ")
    code, details = status(
        evaluator_pb2.AnalyzeRequest(evaluation_ids=["f" * 32], analyses=["layer_table"])
    )
    assert code == grpc.StatusCode.NOT_FOUND
    code, details = status(evaluator_pb2.AnalyzeRequest(analyses=["layer_table"]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no evaluation ids" in details
    channel.close()


def test_a_second_server_answers_for_the_first(fleet: Fleet) -> None:
    with fleet.client() as client:
        record = client.evaluate(_request(batch_sizes=[1]))
    process, address = fleet.start_server()
    try:
        with fleet.client(address) as other:
            wait_for(lambda: _health(address), 30, "the second server")
            assert other.get_evaluation(record.id) == record
            assert len(other.spans(record.trace_id)) == record.span_count
    finally:
        process.stop()


def test_a_killed_server_leaves_nothing_in_flight(fleet: Fleet) -> None:
    """While a second server dispatches an evaluation, the first reports it in flight (from the
    job in etcd); killed with -9, the second's job leaves the registry within its lease TTL
    (+1 s) and the first's listing once etcd's watch pushes that (well within a second), and
    the evaluation, which the agent finishes on its own, is then answered from the store:
    nothing stays "running" and nothing is lost."""
    process, address = fleet.start_server()
    registry = registry_from_url(fleet.registry_url)
    background = Background(fleet, address, min_seconds=8.0)
    try:
        wait_for(lambda: _health(address), 60, "the second server")
        background.thread.start()
        assert background.measuring.wait(60), fleet.logs_text()
        with fleet.client() as survivor:
            [job] = survivor.list_evaluations().in_flight
            assert job.state == "running" and job.agent_id and job.attempt == 1
            with pytest.raises(errors.EvaluationInFlight) as caught:
                survivor.get_evaluation(job.evaluation_id[:12])
            assert f"evaluation {job.evaluation_id} of digits_cnn is running on agent " in str(
                caught.value
            )
            listed = _mlms("evals", env={**fleet.env, "MLMS_SERVER": fleet.address})
            assert "in flight" in listed.stdout and job.evaluation_id[:12] in listed.stdout
            process.kill()
            killed_at = time.monotonic()
            wait_for(lambda: not registry.get_prefix("jobs/"), TTL + 1, "the job to expire")
            assert time.monotonic() - killed_at <= TTL + 1
            wait_for(lambda: not survivor.list_evaluations().in_flight, 1, "the job unlisted")
            background.thread.join(60)
            assert isinstance(background.outcome, errors.Unavailable), background.outcome
            record = wait_for(
                lambda: _stored(survivor, job.evaluation_id), 60, "the agent's record"
            )
        assert record.id == job.evaluation_id and record.results[0].iterations >= 10
    finally:
        registry.close()
        process.stop()
        if background.thread.is_alive():
            background.thread.join(60)


def _stored(client: RemoteClient, evaluation_id: str) -> EvaluationRecord | None:
    try:
        return client.get_evaluation(evaluation_id)
    except (errors.EvaluationInFlight, errors.NotFound):
        return None


def test_killed_agent_mid_evaluation_the_evaluation_completes_elsewhere(fleet: Fleet) -> None:
    registry = registry_from_url(fleet.registry_url)
    background = Background(fleet, None, min_seconds=6.0)
    background.thread.start()
    serving = None
    try:
        assert background.measuring.wait(60), fleet.logs_text()
        jobs = [Job.model_validate_json(v) for v in registry.get_prefix("jobs/").values()]
        assert len(jobs) == 1 and jobs[0].state == "running"
        serving = _address_of(fleet, jobs[0].agent_id)
        fleet.agents[serving].kill()
        killed_at = time.monotonic()
        # The killed agent is gone from the registry within its lease TTL (+1 s).
        wait_for(lambda: serving not in fleet.registered(), TTL + 1, "the killed agent to leave")
        assert time.monotonic() - killed_at <= TTL + 1
        background.thread.join(120)
        record = background.outcome
        assert isinstance(record, EvaluationRecord), f"{record}\n{fleet.logs_text()}"
        assert record.id == jobs[0].evaluation_id  # the same evaluation, not a new one
        assert record.agent["address"] != serving and record.agent["address"] in fleet.live()
        assert record.results[0].iterations >= 10
        # The server removes the job once the record's stream has ended, so just after it.
        wait_for(lambda: not registry.get_prefix("jobs/"), 10, "the finished job's removal")
    finally:
        registry.close()
        if serving is not None:
            del fleet.agents[serving]
            fleet.start_agent()
        wait_for(lambda: fleet.registered() == fleet.live(), 60, "the replacement agent")


def test_sigterm_leaves_the_registry_at_once(fleet: Fleet) -> None:
    address = fleet.start_agent()
    wait_for(lambda: address in fleet.registered(), 60, "the new agent")
    assert fleet.agents.pop(address).terminate() == 0
    assert address not in fleet.registered()  # gone before the process exited, no TTL wait


@pytest.mark.parametrize("wipe", [False, True], ids=["same-data", "data-lost"])
def test_etcd_restart_agents_come_back(fleet: Fleet, etcd, wipe: bool) -> None:
    before = fleet.registered()
    assert before == fleet.live()
    etcd.restart(wipe=wipe)  # data-lost: every lease and key is gone, the leases re-grant
    back_at = time.monotonic()
    wait_for(lambda: _registered_quietly(fleet) == before, 2 * TTL, "agents back after restart")
    assert time.monotonic() - back_at <= 2 * TTL
    with fleet.client() as client:
        wait_for(lambda: len(_agents(client)) == len(before), 2 * TTL, "the server's view")
        record = client.evaluate(_request(batch_sizes=[1]))
    assert record.agent["address"] in before


def _registered_quietly(fleet: Fleet) -> set[str]:
    try:
        return fleet.registered()
    except errors.MlmsError:
        return set()


def _address_of(fleet: Fleet, agent_id: str) -> str:
    with fleet.client() as client:
        return next(a.address for a in client.list_agents() if a.id == agent_id)


def _health(address: str) -> bool:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=2
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def _mlms(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def _one_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("mlms: error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
