"""The server's read path under many clients: the reads a UI and CLIs make (ListModels,
ListAgents, ListEvaluations, GetEvaluation), mixed and each alone, from 64 clients in 4
processes, against the server of this checkout and the server of a reference commit (a git
worktree), one after the other on the same fleet in the same run.

The fleet is the tests' loopback one (``tests/loopback_fleet.py``): etcd, an S3 store (moto, in
this process), agents as processes; a few evaluations are run through it first so that the
index and the store hold records to list and get. Each client is a thread with a channel of its
own that calls in a closed loop (the next call once the last answered), 16 to a process, through
the generated stub (what each call costs the client stays out of the server's share of the
cores). Each phase prints calls/s, p50 and p99 per method (of every call, refused ones too) and
the errors by status code. A client refused for load (RESOURCE_EXHAUSTED) waits the pushback the
server sent before its next call, as a well-behaved client does. Targets, for this checkout's
server on the mix: >= 2,000 calls/s, p99 <= 100 ms, 0 errors; beyond what the server holds
(``--clients 512``): refusals with a pushback instead of latencies that grow without bound.

    .venv/bin/python benchmarks/read_path.py [--reference b493d3f] [--seconds 10] [--rounds 1]
        [--server-args "--workers 2" ...] [--agents 3] [--clients 64] [--processes 4]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the tests' fleet, from a checkout

METHODS = ("ListModels", "ListAgents", "ListEvaluations", "GetEvaluation")
#: Evaluations stored before the clock starts: records to get and a page to list.
EVALUATIONS = 8


def _request(method: str, ids: list[str]):
    from mlms.protos.mlms.v2 import evaluator_pb2

    if method == "ListModels":
        return evaluator_pb2.ListModelsRequest()
    if method == "ListAgents":
        return evaluator_pb2.ListAgentsRequest()
    if method == "ListEvaluations":
        return evaluator_pb2.ListEvaluationsRequest()
    return evaluator_pb2.GetEvaluationRequest(evaluation_id=random.choice(ids))


def client_process(
    address: str, threads: int, methods: tuple[str, ...], ids: list[str], start_at: float,
    seconds: float, results: multiprocessing.Queue,
) -> None:  # fmt: skip
    """``threads`` closed-loop clients, from ``start_at`` (a wall-clock time shared by every
    process) for ``seconds``; puts (method, latency in ms, status code name or "") per call."""
    import grpc

    from mlms.protos.mlms.v2 import evaluator_pb2_grpc

    calls: list[tuple[str, float, str]] = []
    lock = threading.Lock()

    def loop() -> None:
        channel = grpc.insecure_channel(address)
        stub = evaluator_pb2_grpc.EvaluatorStub(channel)
        mine = []
        time.sleep(max(0.0, start_at - time.time()))
        end = start_at + seconds
        while time.time() < end:
            method = random.choice(methods)
            began = time.perf_counter()
            code, pushback = "", None
            try:
                getattr(stub, method)(_request(method, ids), timeout=10)
            except grpc.RpcError as exc:
                code = exc.code().name
                pushback = dict(exc.trailing_metadata() or ()).get("grpc-retry-pushback-ms")
            mine.append((method, (time.perf_counter() - began) * 1e3, code))
            if code and pushback:  # a refusal for load: come back when told to
                time.sleep(int(pushback) / 1000)
        channel.close()
        with lock:
            calls.extend(mine)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put(calls)


def load(address: str, methods: tuple[str, ...], ids: list[str], args) -> list:
    """One phase: every client process started, then started together; its calls."""
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    per_process = args.clients // args.processes
    start_at = time.time() + 3.0  # the processes import grpc meanwhile
    processes = [
        spawn.Process(
            target=client_process,
            args=(address, per_process, methods, ids, start_at, args.seconds, results),
        )
        for _ in range(args.processes)
    ]
    for process in processes:
        process.start()
    calls = [call for _ in processes for call in results.get()]
    for process in processes:
        process.join()
    return calls


def table(calls: list, seconds: float) -> dict:
    """Calls/s, p50 and p99 per method (and of all), and the errors by method and code."""
    by_method: dict[str, list[float]] = defaultdict(list)
    errors: Counter[str] = Counter()
    for method, latency, code in calls:
        by_method[method].append(latency)
        by_method["all"].append(latency)
        if code:
            errors[f"{method} {code}"] += 1
    rows = {}
    for method, latencies in by_method.items():
        rows[method] = (
            len(latencies) / seconds,
            float(np.percentile(latencies, 50)),
            float(np.percentile(latencies, 99)),
        )
    return {"rows": rows, "errors": errors}


class ServerProcess:
    """``mlms server`` from ``checkout`` (its own code: run from there, first on the path)."""

    def __init__(self, checkout: Path, env: dict[str, str], log: Path, extra: list[str]) -> None:
        self.address_file = log.with_suffix(".address")
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "mlms", "server", "--grace", "1", "--listen", "127.0.0.1:0",
             "--address-file", str(self.address_file), *extra],
            cwd=checkout,
            env={**os.environ, **env, "PYTHONPATH": str(checkout)},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    def address(self) -> str:
        from tests.processes import wait_for

        def written() -> str | None:
            assert self.popen.poll() is None, f"the server ended: see {self.log.name}"
            return self.address_file.read_text() if self.address_file.exists() else None

        return wait_for(written, 120, "the server to serve")

    def stop(self) -> None:
        self.popen.terminate()
        self.popen.wait(30)
        self.log.close()


def agents_listed(address: str, count: int) -> bool:
    from mlms.errors import MlmsError
    from mlms.remote_client import RemoteClient

    with RemoteClient(address) as client:
        try:
            return len(client.list_agents()) >= count
        except MlmsError:
            return False


def measure(checkout: Path, extra: list[str], env: dict, ids: list[str], args, log: Path):
    """Each phase's calls against a server started from ``checkout`` with ``extra`` flags."""
    from tests.processes import wait_for

    server = ServerProcess(checkout, env, log, extra)
    try:
        address = server.address()
        wait_for(lambda: agents_listed(address, args.agents), 60, "the agents", every=0.2)
        phases = {"mix": load(address, METHODS, ids, args)}
        for method in METHODS:
            phases[method] = load(address, (method,), ids, args)
        return phases
    finally:
        server.stop()


def print_table(name: str, phases: dict, seconds: float) -> None:
    print(f"\n{name}")
    print(f"  {'phase':<16}{'method':<17}{'calls/s':>9}{'p50 ms':>9}{'p99 ms':>9}  errors")
    for phase, calls in phases.items():
        result = table(calls, seconds)
        rows = result["rows"]
        for method in ("all", *METHODS):
            if method not in rows or (phase != "mix" and method == "all"):
                continue
            rate, p50, p99 = rows[method]
            errors = sum(n for key, n in result["errors"].items() if key.startswith(method)) if (
                method != "all") else sum(result["errors"].values())  # fmt: skip
            print(f"  {phase:<16}{method:<17}{rate:>9.0f}{p50:>9.1f}{p99:>9.1f}  {errors}")
        for key, count in sorted(result["errors"].items()):
            print(f"  {'':<16}error: {key} x{count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default="b493d3f", help="the commit to compare against")
    parser.add_argument("--seconds", type=float, default=10.0, help="of each phase")
    parser.add_argument(
        "--server-args",
        action="append",
        help="this checkout's server's flags, one run per use (default: one run, no flags)",
    )
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of every server, alternated; calls pooled"
    )
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log

    from tests.loopback_fleet import start_fleet
    from tests.netns_fleet import request
    from tests.services import EtcdServer, S3Server

    with tempfile.TemporaryDirectory(prefix="read-path-") as folder:
        root = Path(folder)
        reference = root / "reference"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(reference),
             args.reference], check=True, capture_output=True,
        )  # fmt: skip
        etcd = EtcdServer(root / "etcd").start()
        s3 = S3Server().start()
        os.environ.update(s3.env)
        fleet = None
        try:
            fleet = start_fleet(
                etcd.url, s3.url, s3.env, ["torch"] * args.agents, ["digits_cnn"], root / "fleet"
            )
            with fleet.client() as client:
                ids = [client.evaluate(request(seed=n)).id for n in range(EVALUATIONS)]
            fleet.server.stop()
            fleet.server = None
            results: dict[str, dict[str, list]] = {}
            runs = [(f"reference {args.reference}", reference, [])] + [
                (f"this checkout {flags}".strip(), REPO, shlex.split(flags))
                for flags in args.server_args or [""]
            ]
            for round_ in range(args.rounds):
                for number, (name, checkout, extra) in enumerate(runs):
                    log = root / f"server-{number}-{round_}.log"
                    phases = measure(checkout, extra, fleet.env, ids, args, log)
                    pooled = results.setdefault(name, {})
                    for phase, calls in phases.items():
                        pooled.setdefault(phase, []).extend(calls)
            print(
                f"\n{args.clients} clients in {args.processes} processes, {args.rounds} x "
                f"{args.seconds:.0f} s a phase, {args.agents} agents, {EVALUATIONS} evaluations "
                f"stored; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}"
            )
            for name, phases in results.items():
                print_table(name, phases, args.rounds * args.seconds)
        finally:
            if fleet is not None:
                fleet.stop()
            s3.stop()
            etcd.stop()
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(reference)],
                check=False, capture_output=True,
            )  # fmt: skip


if __name__ == "__main__":
    main()
