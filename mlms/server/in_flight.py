"""The work in flight on every server of the fleet, kept in memory for ListEvaluations.

Each listing names the evaluations in flight beside its page of stored records. Read from the
registry for every call, a flood of listings waited on a flood of registry round trips; here
they come from memory, and how current they are depends on who wrote them:

- This server's own jobs are written here by its ``Jobs`` as it writes them to the registry:
  a job is listed by this server before the dispatch announces it ("assigned"), and a job this
  server finished is gone at once.
- Every other server's come from a watch of ``jobs/``, which etcd pushes as each change
  commits: listed here within the watch's delay (milliseconds on a healthy link). While this
  server cannot reach etcd they are the last it saw; the watch catches up when etcd answers
  (``mlms.registry.etcd_watch``).

A caller that names an id (GetEvaluation, a client following its evaluation through another
server) reads the registry itself (``jobs.find``) and is not bound by the watch's delay.
"""

from __future__ import annotations

import threading

from mlms.registry.base import Registry
from mlms.server.jobs import PREFIX, Job, Kind, oldest_first, readable


class InFlight:
    def __init__(self, registry: Registry, server: str | None = None) -> None:
        """``server``: this server's id (its jobs are written here, not taken from the watch);
        None: a view with no jobs of its own."""
        self.server = server
        self._lock = threading.Lock()
        self._own: dict[str, Job] = {}
        self._others: list[Job] = []
        self._version = 0
        self._watch = registry.watch_prefix(PREFIX, self._observed)

    def jobs(self, kind: Kind | None = None) -> list[Job]:
        """Every evaluation (or bound, or both: None) in flight on a live server, oldest
        first."""
        with self._lock:
            every = [*self._own.values(), *self._others]
        return oldest_first(every, kind)

    def version(self) -> str:
        """Moves with every change of the jobs (what answers built from them are kept under)."""
        with self._lock:
            return str(self._version)

    def wrote(self, job: Job) -> None:
        """A job of this server, as written to the registry."""
        with self._lock:
            self._own[job.evaluation_id] = job
            self._version += 1

    def finished(self, evaluation_id: str) -> None:
        with self._lock:
            if self._own.pop(evaluation_id, None) is not None:
                self._version += 1

    def _observed(self, current: dict[str, bytes]) -> None:
        others = [job for job in readable(current) if job.server != self.server]
        with self._lock:
            self._others = others
            self._version += 1

    def close(self) -> None:
        self._watch.close()
