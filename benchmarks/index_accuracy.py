"""Every task's accuracy in the evaluation index: what sorting by it and migrating to it cost,
side by side with the index's existing orders and inserts in the same run.

An index of ``--records`` rows on SQLite and on a real PostgreSQL server (``tests/postgres.py``):
the rows of a few hundred copies of one real record (``tests/evaluation_copies.py``) under new
ids and dates, with every task's headline (40 % classification, 20 % detection, 20 % language
modelling, 10 % segmentation, 10 % no data set). Printed per database:

1. a first page of 50, p50 over ``--repeat`` calls: ``-created`` (the default order, an SQL
   index) and ``-p50`` (a number without one) as the references, against ``-accuracy`` over
   every row (no SQL index: tasks do not compare), one task newest first and ``-accuracy`` of
   one task (the task's SQL indexes), and the second page of that (through its token);
2. migration 0002 over a 0001 database holding the same rows (opening the index upgrades it),
   against inserting those rows into a new database at the head revision.

    .venv/bin/python benchmarks/index_accuracy.py [--records 100000] [--repeat 20] [--no-postgres]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, from a checkout

#: Columns of revision 0002 (absent from a 0001 row).
ADDED = ("task", "accuracy_metric", "accuracy_value", "accuracy_order")
#: (task, headline key, low, high) of the rows, by share; None: no data set.
TASKS = (
    [("classification", "top1", 0.5, 0.9)] * 4
    + [("detection", "map", 0.2, 0.5)] * 2
    + [("language_modeling", "perplexity", 8.0, 40.0)] * 2
    + [("segmentation", "miou", 0.3, 0.7), None]
)


def rows(count: int, seed: int = 0) -> list[dict]:
    from mlms.database.rows import evaluation_row
    from mlms.evaluation.record import Accuracy
    from tests.evaluation_copies import copies

    rng = random.Random(seed)
    base = copies(300, seed=seed)
    made = []
    for number in range(count):
        record = base[number % len(base)]
        kind = TASKS[number % len(TASKS)]
        accuracy = None
        if kind is not None:
            task, key, low, high = kind
            value = rng.uniform(low, high)
            accuracy = Accuracy(task=task, metrics={key: value}, top1=value if key == "top1"
                                else None, samples=500, dataset=f"{task}-set")  # fmt: skip
        row = evaluation_row(record.model_copy(update={"accuracy": accuracy}))
        row["id"] = uuid.UUID(int=rng.getrandbits(128), version=4).hex
        row["created_at"] = row["created_at"] - timedelta(seconds=number)
        made.append(row)
    return made


def insert(url: str, made: list[dict], revision: str | None = None) -> float:
    """Seconds to insert ``made`` into a new database at ``revision`` (None: the head)."""
    from alembic import command
    from sqlalchemy import insert as sql_insert

    from mlms.database.connect import alembic_config, create
    from mlms.database.schema import evaluations

    engine = create(url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision or "head")
    if revision is not None:
        made = [{k: v for k, v in row.items() if k not in ADDED} for row in made]
    started = time.perf_counter()
    with engine.begin() as connection:
        for start in range(0, len(made), 5000):
            connection.execute(sql_insert(evaluations), made[start : start + 5000])
    seconds = time.perf_counter() - started
    engine.dispose()
    return seconds


def p50_ms(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def measure(name: str, new_url, made: list[dict], repeat: int) -> None:
    from mlms.database.index import EvaluationIndex
    from mlms.evaluation.query import EvaluationQuery

    url = new_url()
    inserted = insert(url, made)
    index = EvaluationIndex(url)
    index.analyze()
    queries = {
        "-created (reference, SQL index)": EvaluationQuery(sort="-created"),
        "-p50 (reference, no SQL index)": EvaluationQuery(sort="-p50"),
        "-accuracy, every task": EvaluationQuery(sort="-accuracy"),
        "-created, task language_modeling": EvaluationQuery(task="language_modeling"),
        "-accuracy, task language_modeling": EvaluationQuery(
            task="language_modeling", sort="-accuracy"
        ),
    }
    for label, query in queries.items():
        took = p50_ms(lambda query=query: index.page(query), repeat)
        print(f"{name}: first page of 50, {label}: p50 {took:.1f} ms", flush=True)
    lm = queries["-accuracy, task language_modeling"]
    second = lm.model_copy(update={"page_token": index.page(lm).next_page_token})
    print(f"{name}: second page of 50, -accuracy, task language_modeling: p50 "
          f"{p50_ms(lambda: index.page(second), repeat):.1f} ms", flush=True)  # fmt: skip
    index.close()

    old = new_url()
    insert(old, made, revision="0001")
    started = time.perf_counter()
    migrated = EvaluationIndex(old)
    seconds = time.perf_counter() - started
    print(f"{name}: migration 0001 -> 0002 of {len(made)} rows: {seconds:.2f} s "
          f"({migrated.count()} rows left, the other tasks' for the rebuild); reference, the "
          f"same rows inserted at the head: {inserted:.2f} s", flush=True)  # fmt: skip
    migrated.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    print(f"index accuracy benchmark: {args.records} rows, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the start", flush=True)  # fmt: skip
    started = time.perf_counter()
    made = rows(args.records)
    print(f"rows made in {time.perf_counter() - started:.1f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="index-accuracy-") as folder:
        files = iter(range(1_000))
        measure("SQLite", lambda: f"sqlite:///{folder}/index-{next(files)}.db", made, args.repeat)
    if not args.no_postgres:
        from tests.postgres import PostgresServer, unavailable

        if unavailable():
            print(f"PostgreSQL: skipped: {unavailable()}")
            return
        server = PostgresServer().start()
        try:
            measure("PostgreSQL", server.database, made, args.repeat)
        finally:
            server.remove()
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


if __name__ == "__main__":
    main()
