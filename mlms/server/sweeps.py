"""Run a sweep's cells in parallel, each evaluated at most once to completion.

Cells are grouped in lanes (on a server: framework and hardware; embedded: one lane), and each
lane runs as many cells at a time as it has agents, each worker taking the lane's next cell
when its evaluation ends, so a lane's agents stay busy until its cells run out however long
each one takes. The dispatcher's load counts spread a lane's evaluations over its agents.

Every change of a cell is stored (``sweeps/<id>.json``) and reported to the caller. ``stop``
lets running cells finish (they are stored) and starts no more: that is what a caller that
went away gets. A cell asked for again looks for its evaluation first (``FleetCells``): a
stored record is taken as it is, an evaluation still in flight is waited for, and only then
is it dispatched, under the cell's own evaluation id.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from datetime import UTC, datetime
from typing import Any

from mlms.errors import MlmsError, Unavailable
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.record_store import is_stored, load_record
from mlms.evaluation.sweep import SweepCell, SweepState, load_sweep, save_sweep
from mlms.library_errors import TRACEBACKS, log_traceback
from mlms.registry.base import Registry
from mlms.rpc.convert import from_proto
from mlms.server import jobs
from mlms.server.dispatch import Dispatcher
from mlms.server.fleet import Fleet
from mlms.store.base import ObjectStore

log = logging.getLogger(__name__)

#: Evaluates one cell: (cell, its request, told the agent's id once one is chosen) -> record.
CellRunner = Callable[[SweepCell, EvaluationRequest, Callable[[str], None]], EvaluationRecord]

#: How often a cell whose evaluation another dispatch owns looks for its record.
POLL_S = 0.5


class SweepRun:
    def __init__(
        self,
        sweep: SweepState,
        store: ObjectStore,
        run_cell: CellRunner,
        lane: Callable[[SweepCell], Hashable] = lambda _cell: "here",
        width: Callable[[Hashable], int] = lambda _lane: 1,
    ) -> None:
        # A cell left running or failed by an earlier run is asked for again.
        self.sweep = sweep.model_copy(
            update={
                "cells": [
                    c if c.state == "completed" else c.model_copy(update={"state": "pending"})
                    for c in sweep.cells
                ]
            }
        )
        self.store = store
        self.run_cell = run_cell
        self._lane = lane
        self._width = width
        self._changed = threading.Condition()
        self._version = 0
        self._workers = 0
        self._stop = threading.Event()

    def start(self) -> SweepRun:
        lanes: dict[Hashable, queue.SimpleQueue[int]] = {}
        for index, cell in enumerate(self.sweep.cells):
            if cell.state != "completed":
                lanes.setdefault(self._lane(cell), queue.SimpleQueue()).put(index)
        save_sweep(self.store, self.sweep)
        with self._changed:
            for lane, cells in lanes.items():
                for slot in range(max(1, min(self._width(lane), cells.qsize()))):
                    self._workers += 1
                    threading.Thread(
                        target=self._work,
                        args=(cells,),
                        name=f"sweep-{self.sweep.id[:8]}-{slot}",
                        daemon=True,
                    ).start()
        return self

    def stop(self) -> None:
        """Start no more cells; those running finish."""
        self._stop.set()

    def updates(self) -> Iterator[SweepState]:
        """The sweep now, then after each change, until no worker is left."""
        seen = -1
        while True:
            with self._changed:
                self._changed.wait_for(lambda seen=seen: self._version != seen or not self._workers)
                seen, state, left = self._version, self.sweep, self._workers
            yield state
            if not left:
                return

    def _work(self, cells: queue.SimpleQueue[int]) -> None:
        try:
            while not self._stop.is_set():
                try:
                    index = cells.get_nowait()
                except queue.Empty:
                    return
                self._run(index)
        finally:
            with self._changed:
                self._workers -= 1
                self._version += 1
                self._changed.notify_all()

    def _run(self, index: int) -> None:
        cell = self.sweep.cells[index]
        self._update(index, state="running", started_at=_now(), finished_at=None, error=None)
        try:
            record = self.run_cell(
                cell,
                cell.request(self.sweep.spec),
                lambda agent: self._update(index, agent_id=agent),
            )
        except MlmsError as exc:
            log_traceback(exc)
            self._update(index, state="failed", finished_at=_now(), error=str(exc))
        except Exception as exc:  # a bug: the cell fails, the sweep goes on
            TRACEBACKS.exception("sweep %s: %s failed", self.sweep.id, cell.describe())
            self._update(index, state="failed", finished_at=_now(), error=type(exc).__name__)
        else:
            self._update(index, **self.sweep.cells[index].completed(record).model_dump())

    def _update(self, index: int, **changes: Any) -> None:
        with self._changed:
            cells = list(self.sweep.cells)
            cells[index] = cells[index].model_copy(update=changes)
            self.sweep = self.sweep.model_copy(update={"cells": cells})
            self._version += 1
            try:
                self._store(index)
            except MlmsError as exc:  # the next change stores it again
                log.warning("sweep %s: could not store its state: %s", self.sweep.id, exc)
            self._changed.notify_all()

    def _store(self, index: int) -> None:
        """The whole sweep; once stopped, only this cell into what is stored: a resumed run
        may be storing the rest by now, and this run's view of it is stale."""
        if not self._stop.is_set():
            save_sweep(self.store, self.sweep)
            return
        stored = load_sweep(self.store, self.sweep.id)
        cells = list(stored.cells)
        cells[index] = self.sweep.cells[index]
        save_sweep(self.store, stored.model_copy(update={"cells": cells}))


class FleetCells:
    """Cells evaluated through a server's dispatcher, each at most once to completion."""

    def __init__(
        self, dispatcher: Dispatcher, fleet: Fleet, registry: Registry, store: ObjectStore
    ) -> None:
        self.dispatcher = dispatcher
        self.fleet = fleet
        self.registry = registry
        self.store = store

    @staticmethod
    def lane(cell: SweepCell) -> Hashable:
        return (cell.framework, cell.hw)

    def width(self, lane: Hashable) -> int:
        """The live agents that can take the lane's cells (its parallelism)."""
        framework, hw = lane  # type: ignore[misc]
        return sum(
            agent.framework == framework and agent.serves_hw(hw) for agent in self.fleet.agents()
        )

    def run(
        self, cell: SweepCell, request: EvaluationRequest, assigned: Callable[[str], None]
    ) -> EvaluationRecord:
        evaluation_id = cell.evaluation_id
        record = self._stored(evaluation_id)
        if record is not None:
            return record
        agent = self._in_flight(evaluation_id)
        if agent is not None:  # from a run the caller left, or whose server died
            assigned(agent)
            record = self._await(evaluation_id)
            if record is not None:
                return record
        for event in self.dispatcher.evaluate(request, evaluation_id=evaluation_id):
            which = event.WhichOneof("event")
            if which == "assigned":
                assigned(event.assigned.agent_id)
            elif which == "evaluation":
                return from_proto(event.evaluation, EvaluationRecord, "record")
        raise Unavailable(f"the evaluation of {cell.describe()} ended without a record")

    def _stored(self, evaluation_id: str) -> EvaluationRecord | None:
        if not is_stored(self.store, evaluation_id):
            return None
        return load_record(self.store, evaluation_id)

    def _in_flight(self, evaluation_id: str) -> str | None:
        """The agent running the evaluation (its record says so), else, while a live server
        dispatches it, that job's agent ("" before one is chosen); None when neither."""
        for agent in self.fleet.agents():
            if evaluation_id in agent.running:
                return agent.id
        job = jobs.find(self.registry, evaluation_id, "evaluation")
        return None if job is None else job.agent_id or ""

    def _await(self, evaluation_id: str) -> EvaluationRecord | None:
        """The record once stored, or None when the evaluation went away without one (its
        agent died, or its dispatch ended without it)."""
        while self._in_flight(evaluation_id) is not None:
            record = self._stored(evaluation_id)
            if record is not None:
                return record
            time.sleep(POLL_S)
        return self._stored(evaluation_id)


def _now() -> datetime:
    return datetime.now(UTC)
