"""The evaluation index at 100,000 records, side by side with reading the store (today's path)
and, with ``--baseline DIR``, with another checkout of mlms (``git archive COMMIT | tar -x -C
DIR``) run the same way in the same run.

Records are made from one real one (``tests/data/evaluation_record.json``, varied by
``tests/evaluation_copies.py``) into a local-folder store. Then, each printed beside its
target (and its ratio to it: >= 1.00x is met) and, where there is one, the store-reading path it
replaces:

1. ``mlms db rebuild`` (the command, a process of its own, timed from start to end) into a new
   SQLite file and a new PostgreSQL database (a real server, ``tests/postgres.py``): records/s
   from the local store (target >= 2,000/s). Reading every record is also what one listing
   cost before the index (``ListEvaluations`` read the whole store).
2. ``ListEvaluations``, first page of 50 filtered by model and hardware, timed server side (the
   servicer's method: the query, the count and the summaries' protobuf; its cache of pages
   off), on both databases (target <= 50 ms).
3. ``GetEvaluation`` p50 over loopback gRPC from an ``mlms server`` process (target <= 2 ms).
4. 64 concurrent clients (4 processes of 16 threads) on that server for ``--seconds``: calls/s,
   p50/p99, errors and the server's CPU time per call (from /proc: what the server would
   serve on one core of its own, whatever else the machine runs): GetEvaluation alone, then a
   mix of 4 GetEvaluation to 1 ListEvaluations (first pages filtered by model and hardware),
   with the server's cache of pages and without (``--listing-cache 0``), then GetEvaluation
   alone with the record cache off (today's) (target >= 2,000 calls/s, p99 <= 100 ms, 0
   errors).
5. The web UI's evaluation list (``mlms ui`` embedded over the same store and SQLite index):
   p50 over loopback HTTP (target <= 300 ms).

    .venv/bin/python benchmarks/evaluation_index.py [--records 100000] [--home DIR]
        [--seconds 10] [--clients 64] [--no-postgres] [--baseline DIR]

With ``--home`` of an earlier run its store (and SQLite index) are used as they are.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, from a checkout

ROOT = Path(__file__).resolve().parents[1]


def say(line: str) -> None:
    print(line, flush=True)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f}"


def ratio(value: float, target: float, higher_is_better: bool) -> str:
    """``value`` against its target: >= 1.00x is met."""
    times = value / target if higher_is_better else target / value if value else float("inf")
    return f"{times:.2f}x the target, {'met' if times >= 1 else 'NOT met'}"


def mlms_command(tree: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """``python -m mlms ARGS`` of the checkout ``tree`` (its own virtualenv when it has one)."""
    python = tree / ".venv" / "bin" / "python"
    return [str(python if python.exists() else sys.executable), "-m", "mlms", *args]


def tree_env(tree: Path, home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "MLMS_HOME": str(home), "PYTHONPATH": str(tree), **extra}


def server_cpu(pid: int) -> float:
    """Seconds of CPU the process has used (user + system, all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rebuild_command(tree: Path, home: Path, database: str, records: int) -> str:
    """``mlms db rebuild`` of ``tree`` into ``database``, timed from start to end."""
    started = time.perf_counter()
    done = subprocess.run(mlms_command(tree, "db", "rebuild", "--database", database),
                          env=tree_env(tree, home), capture_output=True, text=True, timeout=3600,
                          check=True)  # fmt: skip
    seconds = time.perf_counter() - started
    rate = records / seconds
    return (f"{seconds:6.1f} s = {rate:7,.0f} records/s ({ratio(rate, 2000, True)}); "
            f"its line: {done.stdout.strip()[:200]}")  # fmt: skip


def fill(store, count: int) -> float:
    from mlms.evaluation.record_store import RECORDS
    from tests.evaluation_copies import copies

    started = time.perf_counter()
    for start in range(0, count, 5000):
        for record in copies(min(5000, count - start), seed=start):
            RECORDS.save(store, record)
    return time.perf_counter() - started


def timed(call, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return sorted(times)


def list_server_side(url: str, store, picks) -> list[float]:
    """The servicer's ListEvaluations, called as gRPC calls it (no transport)."""
    from opentelemetry.sdk.trace import TracerProvider

    from mlms.database.index import EvaluationIndex
    from mlms.protos.mlms.v2 import evaluation_pb2, evaluator_pb2
    from mlms.registry.memory import MemoryRegistry
    from mlms.server.caches import ListingCache
    from mlms.server.service import EvaluatorService

    index = EvaluationIndex(url)
    service = EvaluatorService(dispatcher=None, fleet=None, registry=MemoryRegistry(),
                               store=store, index=index, provider=TracerProvider(),
                               listings=ListingCache(0))  # fmt: skip
    requests = [
        evaluator_pb2.ListEvaluationsRequest(
            query=evaluation_pb2.EvaluationQuery(model=m, hardware=h, page_size=50)
        )
        for m, h in picks
    ]
    for request in requests[:3]:
        service.ListEvaluations(request, None)  # warm: the connection pool, the page cache
    times = sorted(
        t
        for request in requests
        for t in timed(lambda r=request: service.ListEvaluations(r, None), 1)
    )
    answer = service.ListEvaluations(requests[0], None)
    assert len(answer.summaries) == 50, len(answer.summaries)
    index.close()
    return times


def start_server(tree: Path, home: Path, port: int, **env: str) -> subprocess.Popen:
    command = mlms_command(tree, "server", "--listen", f"127.0.0.1:{port}")
    process = subprocess.Popen(command, env=tree_env(tree, home, **env), cwd=tree,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=120)
    return process


def _load_worker(address: str, ids, picks, threads: int, seconds: float, mix: bool, out) -> None:
    import grpc

    from mlms.protos.mlms.v2 import evaluation_pb2, evaluator_pb2, evaluator_pb2_grpc

    channel = grpc.insecure_channel(address)
    stub = evaluator_pb2_grpc.EvaluatorStub(channel)
    results: list[tuple[str, float, bool]] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(n: int) -> None:
        rng = random.Random(n)
        kept = []
        while time.monotonic() < stop:
            listing = mix and rng.random() < 0.2
            if listing:
                m, h = rng.choice(picks)
                query = evaluation_pb2.EvaluationQuery(model=m, hardware=h, page_size=50)
                call, request = (
                    stub.ListEvaluations,
                    evaluator_pb2.ListEvaluationsRequest(query=query),
                )
            else:
                call = stub.GetEvaluation
                request = evaluator_pb2.GetEvaluationRequest(evaluation_id=rng.choice(ids))
            started = time.perf_counter()
            try:
                call(request, timeout=10)
                ok = True
            except grpc.RpcError:
                ok = False
            kept.append(("list" if listing else "get", time.perf_counter() - started, ok))
        with lock:
            results.extend(kept)

    workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    channel.close()
    out.put(results)


def load(address: str, ids, picks, clients: int, seconds: float, mix: bool) -> dict:
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    processes = 4
    workers = [
        spawn.Process(target=_load_worker,
                      args=(address, ids, picks, clients // processes, seconds, mix, out))
        for _ in range(processes)
    ]  # fmt: skip
    for worker in workers:
        worker.start()
    results = [row for _ in workers for row in out.get(timeout=seconds + 120)]
    for worker in workers:
        worker.join()
    latencies = sorted(t for _, t, _ in results)
    return {
        "calls": len(results),
        "per_s": len(results) / seconds,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[int(len(latencies) * 0.99)],
        "errors": sum(not ok for *_, ok in results),
        "lists": sum(kind == "list" for kind, *_ in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout, run beside this one")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="mlms-index-bench-"))
    home.mkdir(parents=True, exist_ok=True)
    os.environ["MLMS_HOME"] = str(home)
    trees = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])

    from mlms.database.connect import url_for
    from mlms.database.index import EvaluationIndex
    from mlms.database.keeper import rebuild
    from mlms.evaluation.record_store import RECORDS, stored_ids
    from mlms.store.factory import default_store
    from tests.evaluation_copies import HARDWARE, MODELS

    store = default_store()
    say(f"evaluation index benchmark: {home}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the start; trees: "
        + ", ".join(f"{name} {tree}" for name, tree in trees))  # fmt: skip
    have = len(stored_ids(store))
    if have < args.records:
        seconds = fill(store, args.records - have)
        say(f"made {args.records - have} records in {seconds:.0f} s")
    ids = stored_ids(store)
    say(f"{len(ids)} records in {store.url}")

    sqlite_url = url_for(store)  # the servers' and the UI's index
    index = EvaluationIndex(sqlite_url)
    rebuild(store, index)
    index.close()
    postgres = None
    if not args.no_postgres:
        from tests.postgres import PostgresServer, unavailable

        if unavailable() is None:
            postgres = PostgresServer().start()
        else:
            say(f"PostgreSQL skipped: {unavailable()}")
    say("mlms db rebuild, the command from start to end, into a new database:")
    for name, tree in trees:
        scratch = home / f"rebuild-{name}.db"
        scratch.unlink(missing_ok=True)
        say(f"  {name:<8} SQLite     "
            + rebuild_command(tree, home, f"sqlite:///{scratch}", len(ids)))  # fmt: skip
        scratch.unlink(missing_ok=True)
        if postgres is not None:
            say(f"  {name:<8} PostgreSQL "
                + rebuild_command(tree, home, postgres.database(), len(ids)))  # fmt: skip
    sample = random.Random(1).sample(ids, 2000)
    started = time.perf_counter()
    RECORDS.read(store, sample)
    per_record = (time.perf_counter() - started) / len(sample)
    say(f"today's ListEvaluations read every record: {per_record * 1e3:.3f} ms each, "
                 f"{per_record * len(ids):.0f} s per call for {len(ids)} records")  # fmt: skip

    picks = [(m, h) for m in MODELS for h, _, _ in HARDWARE]
    rng = random.Random(2)
    chosen = [rng.choice(picks) for _ in range(60)]
    urls = [("SQLite", sqlite_url)]
    if postgres is not None:
        pg_url = postgres.database()
        pg = EvaluationIndex(pg_url)
        rebuild(store, pg)
        pg.close()
        urls.append(("PostgreSQL", pg_url))
    say("ListEvaluations, first page of 50 filtered by model and hardware, server side, this "
        "tree (ms; target p50 <= 50):")  # fmt: skip
    for name, url in urls:
        times = list_server_side(url, store, chosen)
        p50 = statistics.median(times)
        say(f"  {name:<11} p50 {ms(p50)}  p95 {ms(times[int(len(times) * 0.95)])}  max "
            f"{ms(times[-1])} ({ratio(p50, 0.050, False)})")  # fmt: skip
    if postgres is not None:
        postgres.remove()

    from tests.processes import free_port

    hot = random.Random(3).sample(ids, 2000)
    runs = [(name, tree, mix, "caches on", {}) for name, tree in trees for mix in (False, True)]
    runs += [
        ("this", ROOT, True, "no page cache", {"MLMS_LISTING_CACHE": "0"}),
        ("this", ROOT, False, "record cache off (today)", {"MLMS_RECORD_CACHE": "0"}),
    ]
    for name, tree, mix, label, env in runs:
        port = free_port()
        server = start_server(tree, home, port, **env)
        try:
            measure(name, label, mix, port, server.pid, hot, picks, args)
        finally:
            server.terminate()
            server.wait(30)

    import requests

    from benchmarks.ui_pages import serve

    base = serve()
    session = requests.Session()
    model, hw = chosen[0]
    for path in ("/evaluations", f"/evaluations?model={model}&hardware={hw}",
                 f"/api/evaluations?model={model}&hardware={hw}&limit=50"):  # fmt: skip
        first = timed(lambda p=path: session.get(base + p, timeout=300).raise_for_status(), 1)[0]
        times = timed(lambda p=path: session.get(base + p, timeout=300).raise_for_status(), 20)
        p50 = statistics.median(times)
        say(f"UI {path}: first {ms(first)} ms, p50 {ms(p50)} ms, max {ms(times[-1])} ms "
            f"({ratio(p50, 0.300, False)})")  # fmt: skip
    say(f"load average at the end {os.getloadavg()[0]:.1f}")


def measure(name: str, label: str, mix: bool, port: int, pid: int, hot, picks, args) -> None:
    """GetEvaluation's p50 from one client, then the load of ``args.clients``."""
    import grpc

    from mlms.protos.mlms.v2 import evaluator_pb2, evaluator_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = evaluator_pb2_grpc.EvaluatorStub(channel)
        for evaluation_id in hot:  # each once: into the cache
            stub.GetEvaluation(evaluator_pb2.GetEvaluationRequest(evaluation_id=evaluation_id))
        times = timed(lambda s=stub: s.GetEvaluation(evaluator_pb2.GetEvaluationRequest(
            evaluation_id=random.choice(hot))), 500)  # fmt: skip
    if not mix:
        p50 = statistics.median(times)
        say(f"{name:<8} GetEvaluation over loopback gRPC, {label}: p50 {ms(p50)} ms, p99 "
            f"{ms(times[494])} ms ({ratio(p50, 0.002, False)})")  # fmt: skip
    cpu = server_cpu(pid)
    result = load(f"127.0.0.1:{port}", hot, picks, args.clients, args.seconds, mix)
    per_call = (server_cpu(pid) - cpu) / result["calls"]
    what = "4 GetEvaluation : 1 ListEvaluations" if mix else "GetEvaluation only"
    say(
        f"{name:<8} {args.clients} clients, {what}, {label}: {result['per_s']:,.0f} calls/s "
        f"({ratio(result['per_s'], 2000, True)}), p50 {ms(result['p50'])} ms, p99 "
        f"{ms(result['p99'])} ms ({ratio(result['p99'], 0.100, False)}), {result['errors']} "
        f"errors ({result['calls']} calls, {result['lists']} listings); server CPU "
        f"{per_call * 1e6:.0f} us a call (one core of its own: {1 / per_call:,.0f} calls/s); "
        f"load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
