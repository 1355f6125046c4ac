"""Evaluations started from the UI's form, run in the background, with their progress.

The embedded platform measures in this process, so its evaluations run one at a time (two
side by side would each slow the other's numbers); a server queues them per device itself,
so through one several may be under way at once.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from mlms.errors import MlmsError, NotFound
from mlms.evaluation.progress import Progress, ProgressCallback
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest

log = logging.getLogger(__name__)

#: Finished runs kept for their pages; the oldest are forgotten first (their records stay).
KEEP = 200

State = Literal["queued", "running", "finished", "failed"]
Evaluate = Callable[[EvaluationRequest, ProgressCallback], EvaluationRecord]


@dataclass(frozen=True)
class Run:
    id: str
    request: EvaluationRequest
    started_at: datetime
    state: State = "queued"
    progress: Progress | None = None
    evaluation_id: str | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.state in ("finished", "failed")

    def describe(self) -> str:
        """One line: where the run is."""
        if self.state == "failed":
            return f"failed: {self.error}"
        if self.state == "finished":
            return f"finished: evaluation {self.evaluation_id}"
        if self.progress is None:
            return "waiting for the previous evaluation" if self.state == "queued" else "starting"
        p = self.progress
        return f"batch size {p.batch_size}, {p.run} run: {p.done} of {p.target} predicts"

    def as_json(self) -> dict[str, object]:
        p = self.progress
        return {
            "id": self.id,
            "request": self.request.model_dump(mode="json"),
            "started_at": self.started_at.isoformat(),
            "state": self.state,
            "progress": None if p is None else p.__dict__,
            "evaluation_id": self.evaluation_id,
            "error": self.error,
            "status": self.describe(),
        }


class Runs:
    def __init__(
        self,
        evaluate: Evaluate,
        on_record: Callable[[EvaluationRecord], None],
        *,
        workers: int,
    ) -> None:
        self._evaluate = evaluate
        self._on_record = on_record
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ui-run")
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}

    def start(self, request: EvaluationRequest) -> Run:
        run = Run(secrets.token_hex(8), request, datetime.now(UTC))
        with self._lock:
            self._runs[run.id] = run
            finished = [r.id for r in self._runs.values() if r.done]
            for old in finished[: max(0, len(finished) - KEEP)]:
                del self._runs[old]
        self._pool.submit(self._run, run.id)
        return run

    def get(self, run_id: str) -> Run:
        with self._lock:
            run = self._runs.get(run_id)
        if run is None:
            raise NotFound(
                f"no evaluation started here with run id {run_id!r} (runs are kept "
                "while the UI runs; stored evaluations are under /evaluations)"
            )
        return run

    def active(self) -> list[Run]:
        with self._lock:
            return [r for r in self._runs.values() if not r.done]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _update(self, run_id: str, **changes: object) -> None:
        with self._lock:
            self._runs[run_id] = replace(self._runs[run_id], **changes)  # type: ignore[arg-type]

    def _run(self, run_id: str) -> None:
        self._update(run_id, state="running")
        request = self.get(run_id).request
        try:
            record = self._evaluate(request, lambda p: self._update(run_id, progress=p))
        except MlmsError as exc:
            self._update(run_id, state="failed", error=str(exc))
            return
        except Exception as exc:  # the page must end, and say why, whatever went wrong
            log.exception("evaluation %s started from the UI failed", run_id)
            self._update(run_id, state="failed", error=f"{type(exc).__name__}: {exc}")
            return
        self._on_record(record)
        self._update(run_id, state="finished", evaluation_id=record.id)
