"""The index's side of the store: catching up with records stored while no index took them,
and rebuilding the index from the store (the archive).

Both are idempotent and resumable: each batch of records is committed on its own and an id
indexed already is skipped, so running either again after a crash goes on where it stopped.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mlms.database.catch_up import BATCH, catch_up, read_record
from mlms.database.index import REBUILT_KEY, EvaluationIndex, needs_rebuild
from mlms.database.rows import evaluation_row, result_rows
from mlms.errors import MlmsError
from mlms.evaluation.record_store import stored_ids
from mlms.evaluation.record_store_keys import PENDING
from mlms.evaluation.sweep import PREFIX as SWEEPS
from mlms.evaluation.sweep import SweepState
from mlms.store.base import ObjectStore

log = logging.getLogger(__name__)

#: Records read from the store at once (S3 answers each in a round trip).
READERS = 8
#: Rebuilds of at least this many records read them in processes of their own.
PARALLEL_FROM = 4 * BATCH
#: The state key under which the index keeps the URL of the store it indexes.
STORE_KEY = "store"

Progress = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True)
class Rebuilt:
    stored: int  # records in the store
    indexed: int  # added to the index by this run
    skipped: int  # unreadable records (named in the log)
    sweeps: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.indexed / self.seconds if self.seconds > 0 else 0.0


def rebuild(
    store: ObjectStore,
    index: EvaluationIndex,
    progress: Progress | None = None,
    processes: int | None = None,
) -> Rebuilt:
    """Index every record in the store that the index lacks, and every sweep's cells.

    Reading, validating and inserting the records is the work: past ``PARALLEL_FROM`` missing
    records it runs in ``processes`` processes (default: one per core), each with an index of
    its own over the same database, while this one hands out the batches."""
    started = time.perf_counter()
    ids = stored_ids(store)
    missing = sorted(set(ids) - index.present(ids))
    report = progress or (lambda _done, _total: None)
    report(0, len(missing))
    batches = [missing[start : start + BATCH] for start in range(0, len(missing), BATCH)]
    workers = (os.cpu_count() or 1) if processes is None else processes
    indexed = skipped = done = 0
    with contextlib.ExitStack() as stack:
        if workers > 1 and len(missing) >= PARALLEL_FROM:
            spawn = multiprocessing.get_context("spawn")  # never fork a process with threads
            pool = stack.enter_context(
                ProcessPoolExecutor(
                    workers,
                    mp_context=spawn,
                    initializer=_open_in_process,
                    initargs=(store.url, index.url),
                )
            )
            added = _in_order(pool, batches, 2 * workers)
        else:
            added = (_index_batch(store, index, batch) for batch in batches)
        for batch, (new, unreadable) in zip(batches, added, strict=True):
            indexed += new
            skipped += unreadable
            done += len(batch)
            report(done, len(missing))
    sweeps = 0
    for key in store.list(SWEEPS):
        if key.endswith(".json"):
            try:
                sweep = SweepState.model_validate_json(store.get_bytes(key))
            except (MlmsError, ValueError) as exc:
                log.warning("rebuild: skipping unreadable sweep %s: %s", key, exc)
                continue
            index.add_sweep(sweep.id, sweep.evaluation_ids())
            sweeps += 1
    if indexed:
        index.analyze()
    index.set_state(STORE_KEY, store.url)
    index.set_state(REBUILT_KEY, "yes")
    for key in store.list(PENDING):  # every stored record is indexed now
        store.delete(key)
    return Rebuilt(len(ids), indexed, skipped, sweeps, time.perf_counter() - started)


#: (indexed, unreadable) of one batch.
Added = tuple[int, int]
#: A rebuild's worker process: the store and the index it opened once.
_opened: tuple[ObjectStore, EvaluationIndex] | None = None


def _in_order(pool: ProcessPoolExecutor, batches: list[list[str]], ahead: int):
    """What indexing each batch added, in order, the pool at most ``ahead`` batches ahead (so
    memory stays a few batches whatever the store holds)."""
    waiting: collections.deque[Future[Added]] = collections.deque()
    for batch in batches:
        waiting.append(pool.submit(_index_in_process, batch))
        if len(waiting) >= ahead:
            yield waiting.popleft().result()
    while waiting:
        yield waiting.popleft().result()


def _open_in_process(store_url: str, database_url: str) -> None:
    from mlms.store.factory import store_from_url

    global _opened
    _opened = (store_from_url(store_url), EvaluationIndex(database_url))


def _index_in_process(batch: list[str]) -> Added:
    assert _opened is not None, "the pool's initializer opens them"
    return _index_batch(*_opened, batch)


def _index_batch(store: ObjectStore, index: EvaluationIndex, batch: list[str]) -> Added:
    """Index the readable records of ``batch`` in one transaction (the index skips those it
    has)."""
    rows, batch_rows = _rows_of(store, batch)
    return index.add_rows(rows, batch_rows), len(batch) - len(rows)


Rows = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def _rows_of(store: ObjectStore, batch: list[str]) -> Rows:
    """The index rows of the readable records of ``batch`` (S3 answers each read in a round
    trip: ``READERS`` at once)."""
    with ThreadPoolExecutor(READERS) as pool:
        records = [r for r in pool.map(lambda i: read_record(store, i), batch) if r is not None]
    return [evaluation_row(r) for r in records], [row for r in records for row in result_rows(r)]


def index_sweep(index: EvaluationIndex, sweep: SweepState) -> None:
    """Remember the evaluations the sweep's cells may be in; with the index down the sweep runs
    all the same, and ``mlms db rebuild`` indexes them later (they are in the stored sweep)."""
    try:
        index.add_sweep(sweep.id, sweep.evaluation_ids())
    except MlmsError as exc:
        log.warning("sweep %s: its cells are not indexed now: %s", sweep.id, exc)


class IndexKeeper:
    """A server's background upkeep of the index: the first rebuild of a new database, then a
    catch-up every ``every`` seconds (records stored by agents without the index, or while
    it was down). A failure is logged once and retried at the next turn."""

    def __init__(self, store: ObjectStore, index: EvaluationIndex, every: float = 2.0) -> None:
        self.store = store
        self.index = index
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="index-keeper", daemon=True)
        self._failing = False

    def start(self) -> IndexKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        rebuilt = False
        while not self._stop.is_set():
            try:
                if not rebuilt and needs_rebuild(self.index):
                    done = rebuild(self.store, self.index)
                    log.info(
                        "index %s: %d records of %s indexed in %.1fs",
                        self.index.shown_url, done.indexed, self.store.url, done.seconds,
                    )  # fmt: skip
                rebuilt = True
                added = catch_up(self.store, self.index)
                if added:
                    log.info("index %s: caught up with %d records", self.index.shown_url, added)
                if self._failing:
                    log.info("index %s: reachable again", self.index.shown_url)
                self._failing = False
            except MlmsError as exc:
                if not self._failing:
                    log.warning("index upkeep failed (retrying every %ss): %s", self.every, exc)
                self._failing = True
            self._stop.wait(self.every)
