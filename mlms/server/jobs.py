"""In-flight evaluations in the registry (``jobs/<evaluation_id>``), bound to this server's lease.

A job says which server owns an evaluation, on which agent it runs and which attempt it is.
Bounds are dispatched the same way and keep a job too (``kind`` "bound", the bound's id).
When the server dies its lease expires and its jobs vanish with it, so nothing stays
"running" forever; the records of finished evaluations are in the object store. Any server
reads every server's jobs (``in_flight``, ``find``), which is how a second server answers for
an evaluation that the first is still dispatching; listings read them from memory instead
(``mlms.server.in_flight``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Literal, NoReturn, Protocol

from pydantic import BaseModel, ValidationError

from mlms.errors import InvalidArgument, MlmsError, Unavailable
from mlms.registry.base import Lease, Registry

log = logging.getLogger(__name__)

PREFIX = "jobs/"

Kind = Literal["evaluation", "bound"]


class Job(BaseModel):
    #: The evaluation's id, or the bound's (``kind``).
    evaluation_id: str
    kind: Kind = "evaluation"
    server: str
    model: str
    state: Literal["dispatching", "running"]
    agent_id: str | None = None
    attempt: int = 0
    started_at: datetime
    updated_at: datetime

    def describe(self) -> str:
        """One line for messages: where the evaluation is and since when."""
        where = f" on agent {self.agent_id} (attempt {self.attempt})" if self.agent_id else ""
        return (
            f"{self.kind} {self.evaluation_id} of {self.model} is {self.state}{where}, "
            f"dispatched by server {self.server} at {self.started_at:%Y-%m-%d %H:%M:%S} UTC"
        )


def in_flight(registry: Registry, kind: Kind | None = None) -> list[Job]:
    """Every evaluation (or bound, or both: None) a live server is dispatching now, oldest
    first."""
    return oldest_first(readable(registry.get_prefix(PREFIX)), kind)


def readable(values: Mapping[str, bytes]) -> list[Job]:
    """The jobs among the registry's values under ``jobs/``, by key."""
    jobs = []
    for key, value in values.items():
        try:
            jobs.append(Job.model_validate_json(value))
        except ValidationError:  # another mlms version's job, or a hand-written key
            log.warning("ignoring unreadable job at %s", key)
    return jobs


def oldest_first(jobs: Iterable[Job], kind: Kind | None = None) -> list[Job]:
    """Those of ``kind`` (None: all), oldest first."""
    return sorted(
        (job for job in jobs if kind is None or job.kind == kind), key=lambda job: job.started_at
    )


def find(registry: Registry, evaluation_id: str, kind: Kind | None = None) -> Job | None:
    """The in-flight job with this id or unique id prefix; None when there is none."""
    return matching(in_flight(registry, kind), evaluation_id)


def matching(jobs: Iterable[Job], evaluation_id: str) -> Job | None:
    """The one of ``jobs`` with this id or unique id prefix; None when there is none."""
    matches = [j for j in jobs if j.evaluation_id.startswith(evaluation_id)]
    if len(matches) > 1:
        raise InvalidArgument(
            f"evaluation id {evaluation_id!r} matches {len(matches)} evaluations in flight: "
            "give more of it"
        )
    return matches[0] if matches else None


class View(Protocol):
    """This server's jobs in memory (``mlms.server.in_flight``), told of each as it is written
    to the registry."""

    def wrote(self, job: Job) -> None: ...

    def finished(self, evaluation_id: str) -> None: ...


class Jobs:
    def __init__(
        self, registry: Registry, lease: Lease, server: str, view: View | None = None
    ) -> None:
        """``view``: this server's jobs in flight in memory, which each job is written to as
        it is to the registry (so the server lists its own jobs without waiting for them)."""
        self.registry = registry
        self.lease = lease
        self.server = server
        self.view = view

    def put(self, job: Job) -> None:
        # Bookkeeping: a registry hiccup must not fail an evaluation that an agent can run.
        try:
            self.lease.put(f"{PREFIX}{job.evaluation_id}", job.model_dump_json().encode())
        except MlmsError as exc:
            log.warning("could not record job %s: %s", job.evaluation_id, exc)
        self._shown(job)

    def _shown(self, job: Job) -> None:
        if self.view is not None:
            self.view.wrote(job)

    def start(
        self,
        evaluation_id: str,
        model: str,
        kind: Kind = "evaluation",
        agent_id: str | None = None,
        attempt: int = 0,
    ) -> Job:
        """The job, written to the registry: "running" on ``agent_id`` when the agent is
        already chosen (one write per dispatch), else "dispatching"."""
        now = datetime.now(UTC)
        job = Job(
            evaluation_id=evaluation_id,
            kind=kind,
            server=self.server,
            model=model,
            state="running" if agent_id else "dispatching",
            agent_id=agent_id,
            attempt=attempt,
            started_at=now,
            updated_at=now,
        )
        try:
            self.lease.put(f"{PREFIX}{evaluation_id}", job.model_dump_json().encode())
        except MlmsError:
            try:
                # The registry may be back with this lease lost (restarted without its data,
                # or away past the ttl): granted again now, the job is put with it.
                self.lease.refresh()
            except MlmsError as exc:
                self._refuse(evaluation_id, kind, exc)
        self._shown(job)
        return job

    def _refuse(self, evaluation_id: str, kind: Kind, exc: MlmsError) -> NoReturn:
        # A server cut off from the registry dispatched on its last view of the agents, with
        # no job recorded for any other server to see (its lease expires meanwhile): new work
        # is refused until the registry answers; work already running goes on.
        with contextlib.suppress(MlmsError):
            self.lease.delete(f"{PREFIX}{evaluation_id}")  # not put later, once it answers
        raise Unavailable(
            f"server {self.server} cannot reach the registry {self.registry.url}, so it is "
            f"refusing new {kind}s until it answers ({exc})"
        ) from exc

    def running(self, job: Job, agent_id: str, attempt: int) -> Job:
        job = job.model_copy(
            update={
                "state": "running",
                "agent_id": agent_id,
                "attempt": attempt,
                "updated_at": datetime.now(UTC),
            }
        )
        self.put(job)
        return job

    def finish(self, evaluation_id: str) -> None:
        if self.view is not None:
            self.view.finished(evaluation_id)
        try:
            self.lease.delete(f"{PREFIX}{evaluation_id}")
        except MlmsError as exc:  # the lease expiry removes it anyway
            log.warning("could not remove job %s: %s", evaluation_id, exc)
