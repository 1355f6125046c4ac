"""Run a sweep's cells in parallel, each evaluated at most once to completion.

The cells left to run are grouped (``SweepState.groups``: one model, framework, precision and
hardware), and each group is one evaluation over its batch sizes, so the model loads once for
all of them; each cell takes its batch size's result. An evaluation fails whole when one batch
size fails (out of memory at the largest, say), so a group whose evaluation failed runs its
cells one by one: the others keep their results.

Groups are put in lanes (on a server: framework and hardware; embedded: one lane), and each
lane runs as many groups at a time as it has agents, each worker taking the lane's next group
when its evaluation ends, so a lane's agents stay busy until its groups run out however long
each one takes. The dispatcher's load counts spread a lane's evaluations over its agents.

Every change of a cell is stored (``sweeps/<id>.json``) and reported to the caller. ``stop``
lets running groups finish (they are stored) and starts no more: that is what a caller that
went away gets. A group asked for again looks for its evaluation first (``FleetCells``): a
stored record is taken as it is, an evaluation still in flight is waited for, and only then
is it dispatched, under the group's evaluation id (derived from the cells it covers, so a run
resumed with the same cells left finds it).
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
from mlms.evaluation.record import EvaluationRecord
from mlms.evaluation.record_store import is_stored, load_record
from mlms.evaluation.sweep import CellGroup, SweepCell, SweepState, load_sweep, save_sweep
from mlms.library_errors import TRACEBACKS, log_traceback
from mlms.registry.base import Registry
from mlms.rpc.convert import from_proto
from mlms.server import jobs
from mlms.server.dispatch import Dispatcher
from mlms.server.fleet import Fleet
from mlms.store.base import ObjectStore

log = logging.getLogger(__name__)

#: Evaluates one group of cells: (the group, told the agent's id once one is chosen) -> record.
GroupRunner = Callable[[CellGroup, Callable[[str], None]], EvaluationRecord]

#: How often a group whose evaluation another dispatch owns looks for its record.
POLL_S = 0.5


class SweepRun:
    def __init__(
        self,
        sweep: SweepState,
        store: ObjectStore,
        run_group: GroupRunner,
        lane: Callable[[SweepCell], Hashable] = lambda _cell: "here",
        width: Callable[[Hashable], int] = lambda _lane: 1,
    ) -> None:
        # A cell left running or failed by an earlier run is asked for again, in a group of
        # the cells left with it: each names that group's evaluation before any runs, so the
        # caller indexes the sweep's evaluations (``SweepState.evaluation_ids``) from here.
        sweep = sweep.model_copy(
            update={
                "cells": [
                    c if c.state == "completed" else c.model_copy(update={"state": "pending"})
                    for c in sweep.cells
                ]
            }
        )
        self._groups = sweep.groups()
        self.sweep = sweep.with_groups(self._groups)
        self.store = store
        self.run_group = run_group
        self._lane = lane
        self._width = width
        self._changed = threading.Condition()
        self._version = 0
        self._workers = 0
        self._stop = threading.Event()

    def start(self) -> SweepRun:
        lanes: dict[Hashable, queue.SimpleQueue[tuple[int, ...]]] = {}
        for indices in self._groups:
            lane = self._lane(self.sweep.cells[indices[0]])
            lanes.setdefault(lane, queue.SimpleQueue()).put(indices)
        save_sweep(self.store, self.sweep)
        with self._changed:
            for lane, groups in lanes.items():
                for slot in range(max(1, min(self._width(lane), groups.qsize()))):
                    self._workers += 1
                    threading.Thread(
                        target=self._work,
                        args=(groups,),
                        name=f"sweep-{self.sweep.id[:8]}-{slot}",
                        daemon=True,
                    ).start()
        return self

    def stop(self) -> None:
        """Start no more groups; those running finish."""
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

    def _work(self, groups: queue.SimpleQueue[tuple[int, ...]]) -> None:
        try:
            while not self._stop.is_set():
                try:
                    indices = groups.get_nowait()
                except queue.Empty:
                    return
                self._run(indices)
        finally:
            with self._changed:
                self._workers -= 1
                self._version += 1
                self._changed.notify_all()

    def _run(self, indices: tuple[int, ...]) -> None:
        group = self.sweep.group(indices)
        self._update(_each(indices, state="running", started_at=_now(), finished_at=None,
                           error=None, evaluation_id=group.evaluation_id))  # fmt: skip
        try:
            record = self.run_group(
                group, lambda agent: self._update(_each(indices, agent_id=agent))
            )
            done = {i: self.sweep.cells[i].completed(record).model_dump() for i in indices}
        except Exception as exc:
            if len(indices) == 1:
                self._failed(group, exc)
                return
            log.info("sweep %s: %s failed (%s); its cells run one by one", self.sweep.id,
                     group.describe(), exc)  # fmt: skip
            for index in indices:
                if self._stop.is_set():  # left to the resumed run, as a group not started
                    self._update(_each((index,), state="pending", started_at=None))
                else:
                    self._run((index,))
        else:
            self._update(done)

    def _failed(self, group: CellGroup, exc: Exception) -> None:
        if isinstance(exc, MlmsError):
            log_traceback(exc)
            error = str(exc)
        else:  # a bug: the cell fails, the sweep goes on
            TRACEBACKS.exception("sweep %s: %s failed", self.sweep.id, group.describe())
            error = type(exc).__name__
        self._update(_each(group.indices, state="failed", finished_at=_now(), error=error))

    def _update(self, changes: dict[int, dict[str, Any]]) -> None:
        """Each cell of ``changes`` (by index) changed; stored and reported as one change."""
        with self._changed:
            cells = list(self.sweep.cells)
            for index, change in changes.items():
                cells[index] = cells[index].model_copy(update=change)
            self.sweep = self.sweep.model_copy(update={"cells": cells})
            self._version += 1
            try:
                self._store(list(changes))
            except MlmsError as exc:  # the next change stores it again
                log.warning("sweep %s: could not store its state: %s", self.sweep.id, exc)
            self._changed.notify_all()

    def _store(self, indices: list[int]) -> None:
        """The whole sweep; once stopped, only these cells into what is stored: a resumed run
        may be storing the rest by now, and this run's view of it is stale."""
        if not self._stop.is_set():
            save_sweep(self.store, self.sweep)
            return
        stored = load_sweep(self.store, self.sweep.id)
        cells = list(stored.cells)
        for index in indices:
            cells[index] = self.sweep.cells[index]
        save_sweep(self.store, stored.model_copy(update={"cells": cells}))


class FleetCells:
    """Groups of cells evaluated through a server's dispatcher, each at most once to
    completion."""

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
        """The live agents that can take the lane's groups (its parallelism)."""
        framework, hw = lane  # type: ignore[misc]
        return sum(
            agent.framework == framework and agent.serves_hw(hw) for agent in self.fleet.agents()
        )

    def run(self, group: CellGroup, assigned: Callable[[str], None]) -> EvaluationRecord:
        evaluation_id = group.evaluation_id
        record = self._stored(evaluation_id)
        if record is not None:
            return record
        agent = self._in_flight(evaluation_id)
        if agent is not None:  # from a run the caller left, or whose server died
            assigned(agent)
            record = self._await(evaluation_id)
            if record is not None:
                return record
        for event in self.dispatcher.evaluate(group.request, evaluation_id=evaluation_id):
            which = event.WhichOneof("event")
            if which == "assigned":
                assigned(event.assigned.agent_id)
            elif which == "evaluation":
                return from_proto(event.evaluation, EvaluationRecord, "record")
        raise Unavailable(f"the evaluation of {group.describe()} ended without a record")

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


def _each(indices: tuple[int, ...], **changes: Any) -> dict[int, dict[str, Any]]:
    """The same ``changes`` for each of the cells at ``indices`` (``SweepRun._update``)."""
    return {index: dict(changes) for index in indices}
