"""In-flight evaluations in the registry (``jobs/<evaluation_id>``), bound to this server's lease.

A job says which server owns an evaluation, on which agent it runs and which attempt it is.
When the server dies its lease expires and its jobs vanish with it, so nothing stays
"running" forever; the records of finished evaluations are in the object store.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from mlms.errors import MlmsError
from mlms.registry.base import Lease, Registry

log = logging.getLogger(__name__)

PREFIX = "jobs/"


class Job(BaseModel):
    evaluation_id: str
    server: str
    model: str
    state: Literal["dispatching", "running"]
    agent_id: str | None = None
    attempt: int = 0
    updated_at: datetime


class Jobs:
    def __init__(self, registry: Registry, lease: Lease, server: str) -> None:
        self.registry = registry
        self.lease = lease
        self.server = server

    def put(self, job: Job) -> None:
        # Bookkeeping: a registry hiccup must not fail an evaluation that an agent can run.
        try:
            self.lease.put(f"{PREFIX}{job.evaluation_id}", job.model_dump_json().encode())
        except MlmsError as exc:
            log.warning("could not record job %s: %s", job.evaluation_id, exc)

    def start(self, evaluation_id: str, model: str) -> Job:
        job = Job(
            evaluation_id=evaluation_id,
            server=self.server,
            model=model,
            state="dispatching",
            updated_at=datetime.now(UTC),
        )
        self.put(job)
        return job

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
        try:
            self.lease.delete(f"{PREFIX}{evaluation_id}")
        except MlmsError as exc:  # the lease expiry removes it anyway
            log.warning("could not remove job %s: %s", evaluation_id, exc)
