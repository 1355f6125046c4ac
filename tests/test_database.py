"""The evaluation index (``mlms.database``) on SQLite and on a real PostgreSQL server: first
writer wins, filters, order and pages, the named views, rebuilding from the store, catching up
after an outage, and two servers over one database."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from mlms.database import connect, keeper
from mlms.database.catch_up import catch_up
from mlms.database.index import EvaluationIndex, needs_rebuild
from mlms.database.keeper import rebuild
from mlms.errors import InvalidArgument, Unavailable
from mlms.evaluation.query import EvaluationQuery
from mlms.evaluation.record import EvaluationRecord
from mlms.evaluation.record_store import PENDING, load_record, save_record, stored_ids
from mlms.store.local import LocalStore
from tests.evaluation_copies import copies, real_record
from tests.postgres import PostgresServer
from tests.processes import port_held

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path: Path) -> Iterator[str]:
    """An empty database's URL, of each dialect."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'index.db'}"
    else:
        yield request.getfixturevalue("postgres").database()


@pytest.fixture
def index(database: str) -> Iterator[EvaluationIndex]:
    opened = EvaluationIndex(database)
    yield opened
    opened.close()


def _all_pages(index: EvaluationIndex, query: EvaluationQuery) -> list[str]:
    ids: list[str] = []
    page = index.page(query)
    while True:
        ids += [s.id for s in page.summaries]
        if not page.next_page_token:
            return ids
        page = index.page(query.model_copy(update={"page_token": page.next_page_token}))


def test_a_new_database_is_made_by_the_migrations_once(database: str) -> None:
    first = EvaluationIndex(database)
    again = EvaluationIndex(database)
    assert first.created and not again.created
    assert first.count() == 0 and needs_rebuild(first)
    first.close()
    again.close()


def test_threads_of_one_process_migrate_their_databases_together(tmp_path: Path) -> None:
    """A server and an embedded client in one process open (and so migrate) their indexes at
    the same moment; Alembic's module-global state must not be shared between them."""
    from concurrent.futures import ThreadPoolExecutor

    urls = [f"sqlite:///{tmp_path / f'index-{n}.db'}" for n in range(8)]
    with ThreadPoolExecutor(len(urls)) as pool:
        opened = list(pool.map(EvaluationIndex, urls))
    assert all(index.created and index.count() == 0 for index in opened)
    for index in opened:
        index.close()


def test_a_new_sqlite_index_opens_while_another_connection_writes_it(
    tmp_path: Path, monkeypatch
) -> None:
    """Two server workers create one index at once: while one writes it (its migration), SQLite
    refuses the other's switch to WAL at once, without its busy timeout, and the switch is
    tried again until the writer is done. The writer here is a plain sqlite3 connection
    holding a write transaction, let go once the opening index has been refused."""
    path = tmp_path / "index.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE held (x)")
    refused = threading.Event()

    def again_later(seconds: float) -> None:
        refused.set()
        time.sleep(seconds)

    monkeypatch.setattr(
        connect, "time", SimpleNamespace(monotonic=time.monotonic, sleep=again_later)
    )
    opened: dict[str, EvaluationIndex] = {}
    opening = threading.Thread(
        target=lambda: opened.update(index=EvaluationIndex(f"sqlite:///{path}"))
    )
    opening.start()
    try:
        assert refused.wait(30), "the switch to WAL was never refused"
    finally:
        writer.execute("COMMIT")
        writer.close()
        opening.join(60)
    index = opened["index"]
    assert index.created and index.count() == 0
    index.close()


def test_the_migrations_make_the_schema_the_code_queries(index: EvaluationIndex) -> None:
    """Alembic's comparison of the migrated database with ``schema.py`` finds nothing to add."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from mlms.database.schema import metadata

    with index.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), metadata) == []


def test_the_first_writer_of_an_id_wins(index: EvaluationIndex, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    first, second = copies(2, seed=1)
    second = second.model_copy(update={"id": first.id})
    assert save_record(store, first, index)
    assert not save_record(store, second, index)  # refused: nothing written
    assert load_record(store, first.id) == first
    assert index.count() == 1 and not store.list(PENDING)
    assert index.add([first, second]) == 0  # a bulk add keeps what is there


def _race(url: str, root: str, record_json: str, copy: int, start, answers) -> None:
    """One process's copy of the evaluation: claim and store it as soon as all may go."""
    index = EvaluationIndex(url)
    record = EvaluationRecord.model_validate_json(record_json)
    record = record.model_copy(update={"agent": {"address": f"copy-{copy}"}})
    start.wait()
    answers.put((copy, save_record(LocalStore(Path(root)), record, index)))


def test_first_writer_wins_under_a_real_race(database: str, tmp_path: Path) -> None:
    """Eight processes store copies of one evaluation at the same instant: one is stored."""
    EvaluationIndex(database).close()  # migrated before the race: the race is on the claim
    spawn = multiprocessing.get_context("spawn")
    start, answers = spawn.Barrier(8), spawn.Queue()
    (record,) = copies(1, seed=2)
    racers = [
        spawn.Process(
            target=_race,
            args=(database, str(tmp_path / "store"), record.model_dump_json(), n, start, answers),
        )
        for n in range(8)
    ]
    for racer in racers:
        racer.start()
    results = dict(answers.get(timeout=120) for _ in racers)
    for racer in racers:
        racer.join(30)
    winners = [copy for copy, stored in results.items() if stored]
    assert len(winners) == 1, results
    stored = load_record(LocalStore(tmp_path / "store"), record.id)
    assert stored.agent["address"] == f"copy-{winners[0]}"


def test_filters_orders_and_pages(index: EvaluationIndex) -> None:
    records = copies(240, seed=3)
    assert index.add(records) == 240
    by_id = {r.id: r for r in records}
    model, hw = records[0].model.name, records[0].request.hw
    wanted = {r.id for r in records if r.model.name == model and r.request.hw == hw}
    query = EvaluationQuery(model=model, hardware=hw.upper(), page_size=3)
    page = index.page(query)
    assert page.total == len(wanted) and {s.id for s in page.summaries} <= wanted
    newest = sorted(wanted, key=lambda i: by_id[i].created_at, reverse=True)
    assert _all_pages(index, query) == newest

    # Every order, both ways, pages through every record once, in order.
    for sort, key in [("p50", lambda r: r.results[0].latency_ms.p50),
                      ("throughput", lambda r: r.results[0].throughput),
                      ("model", lambda r: r.model.name)]:  # fmt: skip
        for descending in (False, True):
            ids = _all_pages(
                index, EvaluationQuery(sort=f"{'-' if descending else ''}{sort}", page_size=37)
            )
            assert sorted(ids) == sorted(by_id)
            values = [key(by_id[i]) for i in ids]
            assert values == sorted(values, reverse=descending)

    failed = {r.id for r in records if r.status == "failed"}
    assert set(_all_pages(index, EvaluationQuery(status="failed"))) == failed
    fp16 = {r.id for r in records if r.request.precision == "fp16" and r.framework.name == "torch"}
    assert set(_all_pages(index, EvaluationQuery(precision="fp16", framework="torch"))) == fp16
    middle = sorted(r.created_at for r in records)[100:140]
    dated = EvaluationQuery(since=middle[0], until=middle[-1], page_size=1000)
    assert set(_all_pages(index, dated)) == {r.id for r in records if r.created_at in middle}
    # Free text: every word somewhere in the row (the GPU's name, the agent, an id prefix).
    one = records[7]
    words = EvaluationQuery(text=f"{one.id[:10].upper()} {one.agent['address']}")
    assert [s.id for s in index.page(words).summaries] == [one.id]
    a100 = set(_all_pages(index, EvaluationQuery(text="A100-SXM4", page_size=1000)))
    assert a100 == {r.id for r in records if r.request.hw == "a100"}
    assert index.page(EvaluationQuery(text="50%_")).total == 0  # LIKE's wildcards are literal

    summary = index.page(EvaluationQuery(text=one.id)).summaries[0]
    assert summary.model_dump(exclude={"created_at"}) == summary.of(one).model_dump(
        exclude={"created_at"}
    )
    assert abs(summary.created_at - one.created_at) < timedelta(milliseconds=1)

    # A page token belongs to its query: other filters or another order are refused.
    token = index.page(query).next_page_token
    for other in (EvaluationQuery(model=model, page_token=token),
                  EvaluationQuery(model=model, hardware=hw, sort="p50", page_token=token),
                  EvaluationQuery(page_token="not a token")):  # fmt: skip
        with pytest.raises(InvalidArgument, match=r"page token .*expected the next_page_token"):
            index.page(other)


def test_sweep_filter_and_prefixes(index: EvaluationIndex) -> None:
    records = copies(30, seed=4)
    index.add(records)
    sweep = uuid.uuid4().hex
    members = [r.id for r in records[:5]] + [uuid.uuid4().hex]  # a cell that has not run yet
    index.add_sweep(sweep, members)
    index.add_sweep(sweep, members)  # again: nothing changes
    assert set(_all_pages(index, EvaluationQuery(sweep_id=sweep))) == set(members[:5])
    assert index.resolve(records[0].id[:12]) == [records[0].id]
    assert len(index.resolve("")) == 2


def test_named_views(index: EvaluationIndex) -> None:
    real = real_record()
    versions = {"2.4.1": 3.0, "2.5.1": 2.0, "2.14.1": 2.5}  # the p50 scale of each version
    made = []
    for version, scale in versions.items():
        for repeat in range(2):
            p50 = [r.latency_ms.p50 * scale * (1 + repeat) for r in real.results]
            made.append(
                real.model_copy(
                    update={
                        "id": uuid.uuid4().hex,
                        "framework": real.framework.model_copy(update={"version": version}),
                        "results": [
                            r.model_copy(
                                update={"latency_ms": r.latency_ms.model_copy(update={"p50": v})}
                            )
                            for r, v in zip(real.results, p50, strict=True)
                        ],
                    }
                )
            )
    index.add(made)
    best = index.view("best_p50", EvaluationQuery(model=real.model.name))
    assert [(row.batch_size, row.framework_version) for row in best] == [(1, "2.5.1"), (8, "2.5.1")]
    assert best[0].p50_ms == pytest.approx(real.results[0].latency_ms.p50 * 2.0)
    assert best[0].evaluations == 6
    per_version = index.view("framework_versions", EvaluationQuery(model=real.model.name))
    at_one = {row.framework_version: row for row in per_version if row.batch_size == 1}
    assert set(at_one) == set(versions)
    first = real.results[0].latency_ms.p50
    for version, scale in versions.items():
        assert at_one[version].p50_ms == pytest.approx(first * scale)
        assert at_one[version].mean_p50_ms == pytest.approx(first * scale * 1.5)
        assert at_one[version].evaluations == 2
    with pytest.raises(InvalidArgument, match="view 'worst': expected one of best_p50"):
        index.view("worst", EvaluationQuery())


def test_rebuild_after_losing_the_database(tmp_path: Path, monkeypatch) -> None:
    """The store is the archive: a lost index is made again from it, resuming where a crash
    stopped it, and a second run finds nothing to do."""
    store = LocalStore(tmp_path / "store")
    records = copies(1200, seed=5)
    for record in records:
        save_record(store, record)  # no index: each with a pending marker
    url = f"sqlite:///{tmp_path / 'index.db'}"

    class Crash(Exception):
        pass

    def crash_after_first_batch(done: int, total: int) -> None:
        if done >= 500:
            raise Crash

    index = EvaluationIndex(url)
    with pytest.raises(Crash):
        rebuild(store, index, crash_after_first_batch)
    assert index.count() == 500 and needs_rebuild(index)
    done = rebuild(store, index)  # resumes: only the rest is read
    assert (done.stored, done.indexed, done.skipped) == (1200, 700, 0)
    assert index.count() == 1200 and not needs_rebuild(index) and not store.list(PENDING)
    assert rebuild(store, index).indexed == 0
    index.close()

    (tmp_path / "index.db").unlink()  # lost
    for wal in tmp_path.glob("index.db-*"):
        wal.unlink()
    again = EvaluationIndex(url)
    assert again.created and again.count() == 0
    monkeypatch.setattr(keeper, "PARALLEL_FROM", 0)  # read in two processes, as a big one is
    assert rebuild(store, again, processes=2).indexed == 1200
    assert set(_all_pages(again, EvaluationQuery(page_size=1000))) == set(stored_ids(store))
    again.close()


def test_a_postgresql_whose_port_was_taken_meanwhile_starts_on_another() -> None:
    """The tests' PostgreSQL is given a port found free; one taken before it binds it (as
    another process's connection may take it) sends a first start to a new port."""
    from tests.postgres import unavailable

    if unavailable():
        pytest.skip(unavailable())
    server = PostgresServer()
    taken = server.port
    try:
        with port_held(taken):
            server.start()
        assert server.port != taken
        EvaluationIndex(server.database()).close()
    finally:
        server.remove()


def test_a_record_stored_while_the_database_is_down_is_indexed_when_it_returns(
    tmp_path: Path,
) -> None:
    from tests.postgres import unavailable

    if unavailable():
        pytest.skip(unavailable())
    server = PostgresServer().start()  # its own: this test stops it
    try:
        index = EvaluationIndex(server.database())
        store = LocalStore(tmp_path / "store")
        up, down = copies(2, seed=6)
        assert save_record(store, up, index)
        server.stop()
        with pytest.raises(Unavailable, match=r"database postgresql://.* is unavailable"):
            index.count()
        assert save_record(store, down, index)  # stored all the same, marked for the index
        assert store.list(PENDING) == [f"{PENDING}{down.id}"]
        assert load_record(store, down.id) == down
        server.start()
        assert catch_up(store, index) == 1
        assert index.present([up.id, down.id]) == {up.id, down.id}
        assert not store.list(PENDING)
        index.close()
    finally:
        server.remove()


def test_bad_database_urls_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="database 'mysql://u@h/x': expected sqlite:///"):
        EvaluationIndex("mysql://u@h/x")
    with pytest.raises(InvalidArgument, match="expected a file"):
        EvaluationIndex("sqlite://")
    with pytest.raises(Unavailable, match=r"database postgresql://u:\*\*\*@127\.0\.0\.1:1/x"):
        EvaluationIndex("postgresql://u:secret@127.0.0.1:1/x")


# --- two servers over one PostgreSQL database --------------------------------------------------


@pytest.fixture
def two_servers(postgres: PostgresServer, tmp_path: Path):
    from mlms.remote_client import RemoteClient
    from mlms.server.process import Server, ServerConfig

    url = postgres.database()
    store = tmp_path / "store"
    servers = [
        Server(ServerConfig(store=str(store), database=url, grace=0.5)).start() for _ in range(2)
    ]
    clients = [RemoteClient(f"127.0.0.1:{s.port}") for s in servers]
    yield LocalStore(store), servers, clients
    for client in clients:
        client.close()
    for server in servers:
        server.stop(0.5)


def test_two_servers_answer_from_one_database(two_servers) -> None:
    from tests.processes import wait_for

    store, servers, (first, second) = two_servers
    records = copies(40, seed=7)
    for record in records:  # stored by agents without the database: the servers index them
        save_record(store, record)
    wait_for(lambda: first.list_evaluations().total == 40, 30, "a server to index the store")
    model, hw = records[0].model.name, records[0].request.hw
    query = EvaluationQuery(model=model, hardware=hw, page_size=2)
    one, two = first.list_evaluations(query), second.list_evaluations(query)
    assert one == two and one.total == sum(
        r.model.name == model and r.request.hw == hw for r in records
    )
    later = second.list_evaluations(query.model_copy(update={"page_token": one.next_page_token}))
    assert not {s.id for s in later.summaries} & {s.id for s in one.summaries}

    # The first server answers that page from memory, until any server indexes a record.
    assert first.list_evaluations(query) == one and len(servers[0].service.listings) >= 1
    newer = copies(1, seed=70, base=records[0])[0].model_copy(
        update={"created_at": records[0].created_at + timedelta(days=3650)}
    )
    newer = newer.model_copy(update={"model": records[0].model, "request": records[0].request})
    assert servers[1].index.claim(newer)
    now = first.list_evaluations(query)
    assert now.total == one.total + 1 and now.summaries[0].id == newer.id

    # GetEvaluation: by a prefix through the index, then from the cache; records never change.
    wanted = records[3]
    assert second.get_evaluation(wanted.id[:9]) == wanted
    assert second.get_evaluation(wanted.id) == wanted
    assert len(servers[1].service.records) == 1

    rows = first.view_evaluations("best_p50", EvaluationQuery(model=model))
    assert rows and {row.model for row in rows} == {model}

    # Bad queries are INVALID_ARGUMENT with the reason, over the wire.
    with pytest.raises(InvalidArgument, match="page token"):
        first.list_evaluations(EvaluationQuery(page_token="bogus"))
    from mlms.protos.mlms.v2 import evaluation_pb2, evaluator_pb2, evaluator_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{servers[0].port}") as channel:
        stub = evaluator_pb2_grpc.EvaluatorStub(channel)
        bad = evaluator_pb2.ListEvaluationsRequest(
            query=evaluation_pb2.EvaluationQuery(page_size=5000, sort="colour")
        )
        with pytest.raises(grpc.RpcError) as caught:
            stub.ListEvaluations(bad)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_size" in caught.value.details() or "sort" in caught.value.details()


# --- the command line ---------------------------------------------------------------------------


def _mlms(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"MLMS_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        check=False,
    )


def test_evals_filters_and_db_rebuild_on_the_command_line(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    records = copies(60, seed=8)
    for record in records:
        save_record(store, record)
    rebuilt = _mlms(tmp_path, "db", "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "60 records indexed of 60" in rebuilt.stdout
    model = records[0].model.name
    expected = sorted(
        (r for r in records if r.model.name == model), key=lambda r: r.created_at, reverse=True
    )
    listed = _mlms(tmp_path, "evals", "--model", model, "--limit", "2")
    assert listed.returncode == 0, listed.stderr
    shown = [r.id[:12] for r in records if r.id[:12] in listed.stdout]
    assert sorted(shown) == sorted(r.id[:12] for r in expected[:2])
    assert f"2 of {len(expected)}" in listed.stdout
    bad = _mlms(tmp_path, "evals", "--sort", "colour")
    assert bad.returncode == 1
    assert bad.stderr.strip().startswith("mlms: error: sort: sort 'colour': expected one of")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"page_size": 0}, "page_size: Input should be greater than or equal to 1"),
        ({"page_size": 1001}, "page_size: Input should be less than or equal to 1000"),
        ({"sort": "-colour"}, "sort '-colour': expected one of created, p50"),
        ({"precision": "fp8"}, "precision 'fp8': expected one of fp32"),
        ({"sweep_id": "../x"}, "sweep id '../x': expected 32 hex digits"),
        ({"text": "a\x00b"}, "expected text without NUL characters"),
        ({"model": "m" * 300}, "expected at most 256 characters"),
        ({"since": {"seconds": 2**62}}, "since: Timestamp is not valid"),
        ({"since": {"seconds": 100}, "until": {"seconds": 10}}, "is after until"),
    ],
)
def test_bad_queries_off_the_wire_are_one_line(fields: dict, reason: str) -> None:
    from mlms.protos.mlms.v2 import evaluation_pb2
    from mlms.rpc.convert import from_proto

    message = evaluation_pb2.EvaluationQuery()
    for name, value in fields.items():
        if isinstance(value, dict):
            getattr(message, name).seconds = value["seconds"]
        else:
            setattr(message, name, value)
    with pytest.raises(InvalidArgument, match=r"^bad evaluation query: ") as caught:
        from_proto(message, EvaluationQuery, "evaluation query")
    assert reason in str(caught.value) and "\n" not in str(caught.value)


def test_an_agent_with_the_database_claims_its_records_there(postgres: PostgresServer, store):
    """An agent given ``--database`` claims each record's id before storing it (no pending
    marker), and the server lists it from the same database at once."""
    from mlms.agent.process import Agent, AgentConfig
    from mlms.evaluation.record import EvaluationRequest
    from mlms.registry.memory import MemoryRegistry
    from mlms.remote_client import RemoteClient
    from mlms.server.process import Server, ServerConfig
    from tests.processes import wait_for

    url = postgres.database()
    registry = MemoryRegistry()
    agent = Agent(AgentConfig(framework="torch", grace=0, database=url), registry=registry)
    server = Server(ServerConfig(grace=0, database=url), registry=registry)
    agent.start()
    server.start()
    try:
        wait_for(lambda: server.fleet.agents(), 30, "the agent at the server")
        request = EvaluationRequest(
            model="digits_cnn", framework="torch", iterations=2, warmup=0, min_seconds=0
        )
        with RemoteClient(f"127.0.0.1:{server.port}") as client:
            record = client.evaluate(request)
            listed = client.list_evaluations(EvaluationQuery(text=record.id))
        assert [s.id for s in listed.summaries] == [record.id]
        assert f"{PENDING}{record.id}" not in store.list(PENDING)
        assert agent.index is not None and agent.index.present([record.id]) == {record.id}
    finally:
        server.stop(0)
        agent.stop(0)


def test_a_copy_that_loses_the_claim_discards_its_archive_and_answers_the_first(
    tmp_path: Path, store: LocalStore
) -> None:
    """The race's loser, in the real evaluation loop: its id was claimed by another copy
    whose record is not written yet. It drops its span archive, waits for that record and
    answers with it."""
    import threading

    from mlms.evaluation.record import EvaluationRequest
    from mlms.evaluation.record_store import RECORDS
    from mlms.evaluation.runner import evaluate

    index = EvaluationIndex(f"sqlite:///{tmp_path / 'index.db'}")
    (first,) = copies(1, seed=10)
    archives = store.list("traces/")
    assert index.claim(first)  # the first copy claimed the id, and is still writing its record
    refused = threading.Event()

    class Watched:
        def claim(self, record: EvaluationRecord) -> bool:
            won = index.claim(record)
            if not won:
                refused.set()
            return won

        def forget(self, evaluation_id: str) -> None:
            index.forget(evaluation_id)

    def first_copy_finishes() -> None:
        refused.wait(600)
        RECORDS.save(store, first)

    writer = threading.Thread(target=first_copy_finishes)
    writer.start()
    request = EvaluationRequest(
        model="digits_cnn", framework="torch", iterations=2, warmup=0, min_seconds=0
    )
    answer = evaluate(request, store=store, evaluation_id=first.id, index=Watched())
    writer.join(60)
    assert refused.is_set() and answer == first
    assert store.list("traces/") == archives  # the loser's span archive is gone
    assert load_record(store, first.id) == first
    index.close()
