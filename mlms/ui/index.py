"""The evaluations' summaries, kept fresh in the background, and the search over them.

Reading and validating every record takes a quarter second for 1,000 here, too slow for every
page view. The index keeps one summary per record and lists again in a background thread once
the last listing is ``REFRESH_S`` old; records never change once stored, so a listing asks only
for the records it has no summary of (and learns which ids are stored, dropping the rest). A
page never waits for a listing except the first one; an evaluation started from the UI is added
the moment it finishes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from datetime import time as day_time

from mlms.client import Evaluations
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRecord
from mlms.report.evaluations import device_name
from mlms.server.jobs import Job

REFRESH_S = 2.0


@dataclass(frozen=True)
class Summary:
    """What the evaluations table shows and filters on."""

    id: str
    created_at: datetime
    model: str
    framework: str
    framework_version: str
    hardware: str  # the requested alias and the device's name: "cpu", "h100 NVIDIA H100 ..."
    device: str
    trace_level: str
    options: str  # precision, compile mode, input options (``EvaluationRequest.options``)
    batch_sizes: tuple[int, ...]
    p50_ms: float | None  # at the first batch size
    throughput: float | None  # inputs/s at the first batch size
    status: str

    @classmethod
    def of(cls, record: EvaluationRecord) -> Summary:
        first = record.results[0] if record.results else None
        name, alias = device_name(record), record.request.hw
        return cls(
            id=record.id,
            created_at=record.created_at,
            model=record.model.name,
            framework=record.framework.name,
            framework_version=record.framework.version,
            hardware=alias if name == alias else f"{alias} {name}",
            device=record.device,
            trace_level=record.trace_level,
            options=record.request.options(),
            batch_sizes=tuple(r.batch_size for r in record.results),
            p50_ms=first.latency_ms.p50 if first else None,
            throughput=first.throughput if first else None,
            status=record.status,
        )

    def as_json(self) -> dict[str, object]:
        return {
            **self.__dict__,
            "created_at": self.created_at.isoformat(),
            "batch_sizes": list(self.batch_sizes),
        }


@dataclass(frozen=True)
class Filters:
    """The search: words anywhere in a row, exact model and framework, a hardware substring,
    and a range of days (UTC, both ends included)."""

    text: str = ""
    model: str = ""
    framework: str = ""
    hardware: str = ""
    since: date | None = None
    until: date | None = None

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        """From query parameters; a bad date names itself and the expected form."""
        unknown = sorted(set(query) - {"q", "model", "framework", "hardware", "since", "until"})
        if unknown:
            raise InvalidArgument(
                f"unknown search parameter {unknown[0]!r}: expected q, model, framework, "
                "hardware, since or until"
            )
        return cls(
            text=query.get("q", "").strip().lower(),
            model=query.get("model", "").strip(),
            framework=query.get("framework", "").strip(),
            hardware=query.get("hardware", "").strip().lower(),
            since=_day("since", query.get("since", "")),
            until=_day("until", query.get("until", "")),
        )

    def match(self, rows: list[Summary]) -> list[Summary]:
        start = datetime.combine(self.since, day_time.min, UTC) if self.since else None
        end = datetime.combine(self.until, day_time.max, UTC) if self.until else None
        words = self.text.split()
        return [
            row
            for row in rows
            if (not self.model or row.model == self.model)
            and (not self.framework or row.framework == self.framework)
            and (not self.hardware or self.hardware in row.hardware.lower())
            and (start is None or row.created_at >= start)
            and (end is None or row.created_at <= end)
            and all(word in _haystack(row) for word in words)
        ]


def _day(name: str, text: str) -> date | None:
    if not text.strip():
        return None
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgument(f"bad {name} date {text!r}: expected YYYY-MM-DD") from None


def _haystack(row: Summary) -> str:
    return (
        f"{row.id} {row.model} {row.framework} {row.framework_version} {row.hardware} "
        f"{row.device} {row.trace_level} {row.options} {row.status}"
    ).lower()


@dataclass(frozen=True)
class Snapshot:
    rows: list[Summary]  # newest first
    in_flight: list[Job]
    listed_at: float  # time.monotonic() of the listing


class EvaluationIndex:
    def __init__(self, list_evaluations: Callable[[Collection[str]], Evaluations]) -> None:
        self._list = list_evaluations
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._added: dict[str, Summary] = {}  # finished since the last listing began
        self._refreshing = False
        self._error: Exception | None = None
        self._first = threading.Lock()  # held by the first listing, which pages wait for

    def warm(self) -> None:
        """Start the first listing in the background now, so that the first page finds it
        done instead of reading every record itself."""
        threading.Thread(target=self._warm, name="ui-index-warm", daemon=True).start()

    def _warm(self) -> None:
        with contextlib.suppress(Exception):  # a page's own first listing reports the error
            self._first_listing()

    def snapshot(self) -> Snapshot:
        """The latest listing; the first call lists, later ones start a refresh when stale.
        A refresh that failed raises its error here once (a revoked token, a server gone)."""
        with self._lock:
            error, self._error = self._error, None
            current = self._snapshot
            stale = current is not None and time.monotonic() - current.listed_at > REFRESH_S
            if stale and not self._refreshing:
                self._refreshing = True
                threading.Thread(target=self._refresh, name="ui-index", daemon=True).start()
        if error is not None:
            raise error
        return current if current is not None else self._first_listing()

    def _first_listing(self) -> Snapshot:
        with self._first:
            with self._lock:
                current = self._snapshot
            return current if current is not None else self._load()

    def add(self, record: EvaluationRecord) -> None:
        summary = Summary.of(record)
        with self._lock:
            self._added[summary.id] = summary
            if self._snapshot is not None:
                self._snapshot = Snapshot(
                    [summary, *(r for r in self._snapshot.rows if r.id != summary.id)],
                    self._snapshot.in_flight,
                    self._snapshot.listed_at,
                )

    def _load(self) -> Snapshot:
        with self._lock:
            added = dict(self._added)
            held = {r.id: r for r in self._snapshot.rows} if self._snapshot else {}
        listing = self._list(held.keys())
        listed = {r.id: r for r in map(Summary.of, listing.records)}
        stored = set(listing.stored_ids)
        listed |= {key: row for key, row in held.items() if key in stored}
        rows = {**added, **listed}  # added: finished after the listing began
        snapshot = Snapshot(
            sorted(rows.values(), key=lambda r: r.created_at, reverse=True),
            listing.in_flight,
            time.monotonic(),
        )
        with self._lock:
            self._snapshot = snapshot
            for key in listed.keys() & added.keys():
                self._added.pop(key, None)
        return snapshot

    def _refresh(self) -> None:
        try:
            self._load()
        except Exception as exc:  # kept for the next page view, which reports it
            with self._lock:
                self._error = exc
        finally:
            with self._lock:
                self._refreshing = False
