"""What the distributed path costs over the embedded one.

1. Per-iteration latency, remote vs embedded: rounds that alternate an embedded evaluation
   (``EmbeddedClient``) with the same evaluation through ``mlms server`` -> ``mlms agent`` over
   loopback gRPC: by default both as processes on a real etcd, as deployed (``--fleet
   in-process`` runs them in this process on one in-memory registry instead). The ratio of the
   medians of the records' model-level p50 is the dispatch path's cost to what it measures
   (target <= 1.02); the wall time per evaluation shows the fixed cost of the round trip.
2. Predict round trip: one 1x3x224x224 float32 tensor through an agent process's Predict on
   loopback against the same predictor called in this process, interleaved; the difference of
   the p50s is what gRPC adds (target <= 1 ms). Interleaved with them, the same request bytes go
   to a bare grpcio servicer in a second child process (no mlms code: a generic handler that
   answers 4 KB, a reply of 1,000 logits' size): gRPC's own floor on this machine, so that
   what mlms adds to it can be told apart from what the transport costs. Interleaved too, the
   same tensor through the agent's Open Inference Protocol (ModelInfer, raw contents, as
   tritonclient sends it): the ratio of its p50 to Predict's (target <= 1.1).
3. Security's cost: Evaluator.Predict through a server to an agent, the whole path plaintext
   against the whole path secured (TLS to the server with a bearer token checked on every call,
   mutual TLS from the server to the agent), two fleets in this process, calls interleaved;
   the ratio of the p50s (target <= 1.05), for each model of --secure-models.

    .venv/bin/python benchmarks/dispatch_overhead.py [--model resnet50] [--rounds 6]
        [--iterations 20] [--threads N] [--fleet processes|in-process]
        [--predict-model squeezenet1_1] [--calls 200] [--main-thread]
        [--secure-models squeezenet1_1,digits_cnn] [--only secure|predict]

The in-process side runs on a worker thread, as the agent runs evaluations and predicts, so
that both sides differ only in the dispatch path. With --main-thread it runs on the main thread
as the embedded CLI does: on an oversubscribed machine torch's OpenMP team spin-waits there
(OMP_WAIT_POLICY=active) and a main-thread loop can be many times slower than the same loop on
a worker thread, which says nothing about dispatch.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.services

_MAIN_THREAD = False


def in_process(call, *args):
    """``call(*args)`` on a fresh thread, as the agent runs each evaluation (see the docstring)."""
    if _MAIN_THREAD:
        return call(*args)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="in-process") as worker:
        return worker.submit(call, *args).result()


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


@contextlib.contextmanager
def in_process_fleet() -> Iterator[object]:
    """Server and agent in this process, sharing one in-memory registry."""
    from mlms.agent.process import Agent, AgentConfig
    from mlms.registry.factory import registry_from_url
    from mlms.remote_client import RemoteClient
    from mlms.server.process import Server, ServerConfig

    registry = registry_from_url("memory://")
    agent = Agent(AgentConfig(framework="torch"), registry=registry).start()
    server = Server(ServerConfig(), registry=registry).start()
    remote = RemoteClient(f"127.0.0.1:{server.port}")
    try:
        yield remote
    finally:
        remote.close()
        server.stop(0)
        agent.stop(0)


@contextlib.contextmanager
def process_fleet() -> Iterator[object]:
    """A real etcd, one ``mlms agent`` and one ``mlms server`` process, as deployed."""
    from mlms.remote_client import RemoteClient
    from tests.processes import MlmsProcess, free_port, wait_for
    from tests.services import EtcdServer  # the tests' launcher of a real etcd on loopback

    with tempfile.TemporaryDirectory() as folder:
        etcd = EtcdServer(Path(folder) / "etcd").start()
        registry = f"etcd://{etcd.address}"
        agent_port, server_port = free_port(), free_port()
        agent = MlmsProcess(
            [
                "agent",
                "--framework",
                "torch",
                "--listen",
                f"127.0.0.1:{agent_port}",
                "--registry",
                registry,
            ],
            Path(folder) / "agent.log",
        )
        server = MlmsProcess(
            ["server", "--listen", f"127.0.0.1:{server_port}", "--registry", registry],
            Path(folder) / "server.log",
        )
        remote = RemoteClient(f"127.0.0.1:{server_port}")
        try:
            wait_for(lambda: _listed(remote), 120, "the agent in the server's fleet", every=0.5)
            yield remote
        finally:
            remote.close()
            server.stop()
            agent.stop()
            etcd.stop()


def _listed(remote) -> bool:
    from mlms.errors import MlmsError

    try:
        return bool(remote.list_agents())
    except MlmsError:
        return False


def remote_vs_embedded(
    model: str, rounds: int, iterations: int, fleet: str, threads: int | None
) -> None:
    from mlms.client import EmbeddedClient
    from mlms.evaluation.record import EvaluationRequest

    embedded = EmbeddedClient()
    request = EvaluationRequest(
        model=model,
        framework="torch",
        iterations=iterations,
        warmup=3,
        min_seconds=0.0,
        intra_op_threads=threads,
    )
    in_process(embedded.evaluate, request)  # builds the asset once, outside the measurement
    p50 = {"embedded": [], "remote": []}
    wall = {"embedded": [], "remote": []}
    with process_fleet() if fleet == "processes" else in_process_fleet() as remote:
        for number in range(rounds):
            pair = [("embedded", embedded), ("remote", remote)]
            for name, client in pair if number % 2 == 0 else pair[::-1]:  # ABBA: no order bias
                start = time.perf_counter()
                record = (
                    in_process(client.evaluate, request)
                    if client is embedded
                    else client.evaluate(request)
                )
                wall[name].append(time.perf_counter() - start)
                p50[name].append(record.results[0].latency_ms.p50)
    e, r = statistics.median(p50["embedded"]), statistics.median(p50["remote"])
    where = "main thread" if _MAIN_THREAD else "a worker thread"
    print(
        f"remote vs embedded: {model}, torch, batch 1, {iterations} iterations, {rounds} rounds "
        f"(embedded on {where}; fleet: {fleet}; intra-op threads: {threads or 'default'})"
    )
    print(f"  embedded p50 per iteration   {e:8.3f} ms   (rounds: {_fmt(p50['embedded'])})")
    print(f"  remote   p50 per iteration   {r:8.3f} ms   (rounds: {_fmt(p50['remote'])})")
    paired = statistics.median(
        remote_p50 / embedded_p50
        for remote_p50, embedded_p50 in zip(p50["remote"], p50["embedded"], strict=True)
    )
    print(f"  ratio of the medians         {r / e:8.3f}     (target <= 1.02)")
    print(f"  median of per-round ratios   {paired:8.3f}     (each round's pair ran back to back)")
    we, wr = statistics.median(wall["embedded"]), statistics.median(wall["remote"])
    print(
        f"  wall per evaluation          {we:8.3f} s embedded, {wr:.3f} s remote "
        f"(+{(wr - we) * 1e3:.0f} ms)"
    )


def predict_round_trip(model: str, calls: int) -> None:
    import grpc

    from mlms.assets.manager import AssetManager
    from mlms.catalog.zoo import get_model
    from mlms.config import mlms_home
    from mlms.predictors.base import PredictorOptions
    from mlms.predictors.registry import predictor_class
    from mlms.protos.inference import grpc_service_pb2 as oip
    from mlms.protos.inference import grpc_service_pb2_grpc as oip_grpc
    from mlms.protos.mlms.v2 import calls_pb2, predictor_pb2, predictor_pb2_grpc, types_pb2
    from mlms.rpc import tensors
    from mlms.rpc.options import CHANNEL_OPTIONS
    from mlms.store.factory import default_store

    manifest = get_model(model)
    asset = AssetManager(default_store(), mlms_home() / "cache").ensure(manifest, "torch")
    local = in_process(predictor_class("torch"), manifest, asset.path, PredictorOptions("cpu"))
    batch = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    port = _free_port()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlms",
            "agent",
            "--framework",
            "torch",
            "--listen",
            f"127.0.0.1:{port}",
            "--registry",
            "memory://",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    echo_port = _free_port()
    echo = subprocess.Popen(
        [sys.executable, __file__, "--echo-server", str(echo_port)], env=os.environ.copy()
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    echo_channel = grpc.insecure_channel(f"127.0.0.1:{echo_port}", options=CHANNEL_OPTIONS)
    try:
        grpc.channel_ready_future(channel).result(timeout=120)
        grpc.channel_ready_future(echo_channel).result(timeout=60)
        bare = echo_channel.unary_unary(f"/{_ECHO_METHOD}")
        stub = predictor_pb2_grpc.PredictorStub(channel)
        session = stub.Open(
            predictor_pb2.OpenRequest(spec=types_pb2.ModelSpec(model=model, hw="cpu")),
            timeout=300,
        ).session_id
        request = calls_pb2.PredictRequest(session_id=session, tensor=tensors.to_proto(batch))
        request_bytes = request.SerializeToString()
        infer_stub = oip_grpc.GRPCInferenceServiceStub(channel)
        infer = oip.ModelInferRequest(
            model_name=model,
            inputs=[
                oip.ModelInferRequest.InferInputTensor(
                    name=manifest.inputs[0].name, datatype="FP32", shape=list(batch.shape)
                )
            ],
            raw_input_contents=[batch.tobytes()],
        )
        in_process_ms, over_grpc, agent_side, floor, over_oip = [], [], [], [], []

        def interleave() -> None:
            # One thread for the whole loop, as the agent's gRPC worker threads persist.
            for _ in range(10):  # warm every side
                local.predict(batch)
                stub.Predict(request)
                bare(request_bytes)
                infer_stub.ModelInfer(infer)
            for number in range(calls):
                in_process_ms.append(_timed(local.predict, batch))
                # Predict and ModelInfer take turns going first: the first shares the CPU with
                # the in-process predictor's OpenMP threads, still spinning after it.
                for side in ("predict", "infer") if number % 2 == 0 else ("infer", "predict"):
                    if side == "infer":
                        over_oip.append(_timed(_infer_logits, infer_stub, infer))
                        continue
                    start = time.perf_counter_ns()
                    reply = stub.Predict(request)
                    tensors.from_proto(reply.logits)
                    over_grpc.append((time.perf_counter_ns() - start) / 1e6)
                    agent_side.append(reply.predict_ns / 1e6)
                floor.append(_timed(bare, request_bytes))

        in_process(interleave)
    finally:
        channel.close()
        echo_channel.close()
        for child in (agent, echo):
            child.terminate()
            child.wait(30)
        local.close()
    added = percentile(over_grpc, 50) - percentile(in_process_ms, 50)
    print(
        f"predict round trip: {model}, one 1x3x224x224 float32 tensor "
        f"({batch.nbytes / 1024:.0f} KiB), {calls} interleaved calls"
    )
    print(f"  in-process predict p50       {percentile(in_process_ms, 50):8.3f} ms")
    print(
        f"  gRPC Predict p50             {percentile(over_grpc, 50):8.3f} ms   "
        f"(agent's own predict p50 {percentile(agent_side, 50):.3f} ms)"
    )
    print(f"  added by gRPC (p50 - p50)    {added:8.3f} ms   (target <= 1 ms)")
    transport = [o - a for o, a in zip(over_grpc, agent_side, strict=True)]
    print(
        f"  per call, gRPC minus the agent's predict: p50 {percentile(transport, 50):.3f} ms, "
        f"p99 {percentile(transport, 99):.3f} ms"
    )
    print(
        f"  bare grpcio, same request bytes: p50 {percentile(floor, 50):.3f} ms "
        f"(gRPC's floor here); mlms over it: "
        f"{percentile(transport, 50) - percentile(floor, 50):.3f} ms"
    )
    print(
        f"  Open Inference ModelInfer p50 {percentile(over_oip, 50):7.3f} ms   "
        f"({percentile(over_oip, 50) / percentile(over_grpc, 50):.3f}x Predict's p50; "
        "target <= 1.1)"
    )


@contextlib.contextmanager
def _fleet(folder: Path, tls: dict[str, object] | None) -> Iterator[object]:
    """A server and a torch agent in this process; secured when ``tls`` gives their files and
    the client's token."""
    from mlms.agent.process import Agent, AgentConfig
    from mlms.registry.factory import registry_from_url
    from mlms.remote_client import RemoteClient
    from mlms.server.process import Server, ServerConfig

    tls = tls or {}
    registry = registry_from_url("memory://")
    agent = Agent(AgentConfig(framework="torch", **tls.get("agent", {})), registry=registry)
    server = Server(
        ServerConfig(store=str(folder), auth=bool(tls), **tls.get("server", {})),
        registry=registry,
    )
    agent.start()
    server.start()
    remote = RemoteClient(f"127.0.0.1:{server.port}", **tls.get("client", {}))
    try:
        deadline = time.monotonic() + 60
        while not server.fleet.agents():
            if time.monotonic() > deadline:
                raise RuntimeError("the agent was not admitted into the fleet within 60 s")
            time.sleep(0.05)
        yield remote
    finally:
        remote.close()
        server.stop(0)
        agent.stop(0)
        registry.close()


def secure_vs_plaintext(models: list[str], calls: int) -> None:
    from mlms.catalog.zoo import get_model
    from mlms.protos.mlms.v2 import calls_pb2, types_pb2
    from mlms.rpc import tensors
    from mlms.security.ca import issue, make_ca
    from mlms.security.tls import TlsFiles
    from mlms.security.tokens import Tokens
    from mlms.store.local import LocalStore

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        ca = make_ca()
        (folder / "ca.pem").write_bytes(ca.cert)
        files = {}
        for role in ("server", "agent"):
            pem = issue(ca, role, ["127.0.0.1"])
            (folder / f"{role}.pem").write_bytes(pem.cert)
            (folder / f"{role}-key.pem").write_bytes(pem.key)
            files[role] = TlsFiles.load(
                str(folder / "ca.pem"), str(folder / f"{role}.pem"), str(folder / f"{role}-key.pem")
            )
        token = Tokens(LocalStore(folder / "secure"))
        secure = {
            "server": {"tls": files["server"]},
            "agent": {"tls": files["agent"]},
            "client": {
                "tls": TlsFiles.load(str(folder / "ca.pem")),
                "token": token.create("benchmark", ["read", "run"])[1],
            },
        }
        with (
            _fleet(folder / "plain", None) as plain,
            _fleet(folder / "secure", secure) as secured,
        ):
            for model in models:
                shape = (1, *get_model(model).inputs[0].shape)
                batch = np.random.default_rng(0).random(shape, dtype=np.float32)
                spec = types_pb2.ModelSpec(model=model, framework="torch", hw="cpu")
                request = calls_pb2.PredictRequest(spec=spec, tensor=tensors.to_proto(batch))
                pair = [("plaintext", plain), ("secured", secured)]
                times = in_process(_interleaved, pair, request, calls)
                p, q = percentile(times["plaintext"], 50), percentile(times["secured"], 50)
                print(
                    f"security on the predict path: {model}, {'x'.join(map(str, shape))} "
                    f"float32 ({batch.nbytes / 1024:.0f} KiB), {calls} interleaved calls "
                    "client -> server -> agent"
                )
                print(f"  plaintext, no token   p50 {p:8.3f} ms")
                print(
                    f"  TLS + token + mTLS    p50 {q:8.3f} ms   ratio {q / p:.3f} "
                    f"(+{q - p:.3f} ms; target <= 1.05)"
                )


def _interleaved(pair: list[tuple[str, object]], request: object, calls: int) -> dict:
    """Milliseconds per ``predict`` of each client, alternating which goes first."""
    for _ in range(10):  # sessions opened, channels and handshakes done
        for _, client in pair:
            client.predict(request)
    times: dict[str, list[float]] = {side: [] for side, _ in pair}
    for number in range(calls):
        for side, client in pair if number % 2 == 0 else pair[::-1]:
            times[side].append(_timed(client.predict, request))
    return times


_ECHO_METHOD = "probe.Echo/Echo"


def echo_server(port: int) -> None:
    """A bare grpcio servicer: any request in, 4 KB out (mlms's limits, nothing else)."""
    from concurrent import futures

    import grpc

    from mlms.rpc.options import SERVER_OPTIONS

    reply = bytes(4000)
    service, method = _ECHO_METHOD.split("/")
    handler = grpc.method_handlers_generic_handler(
        service, {method: grpc.unary_unary_rpc_method_handler(lambda request, context: reply)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def _infer_logits(stub, request) -> np.ndarray:
    """ModelInfer's logits, decoded as a client would."""
    return np.frombuffer(stub.ModelInfer(request).raw_output_contents[0], "<f4")


def _timed(call, *args) -> float:
    """Milliseconds one call takes, timed on the thread that runs it."""
    start = time.perf_counter_ns()
    call(*args)
    return (time.perf_counter_ns() - start) / 1e6


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--predict-model", default="squeezenet1_1")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--main-thread", action="store_true", help="in-process side on main")
    parser.add_argument("--threads", type=int, help="intra-op threads of part 1's evaluations")
    parser.add_argument("--secure-models", default="squeezenet1_1,digits_cnn")
    parser.add_argument(
        "--only", choices=["secure", "predict"], help="run part 3, or part 2, alone"
    )
    parser.add_argument("--echo-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument(
        "--fleet",
        choices=["processes", "in-process"],
        default="processes",
        help="server and agent as processes on a real etcd (as deployed), or in this process",
    )
    args = parser.parse_args()
    if args.echo_server:  # the child process of part 2
        echo_server(args.echo_server)
        return
    global _MAIN_THREAD
    _MAIN_THREAD = args.main_thread
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    if args.only is None:
        remote_vs_embedded(args.model, args.rounds, args.iterations, args.fleet, args.threads)
    if args.only in (None, "predict"):
        predict_round_trip(args.predict_model, args.calls)
    if args.only in (None, "secure"):
        secure_vs_plaintext(args.secure_models.split(","), args.calls)


if __name__ == "__main__":
    main()
