"""The span record: one row of the trace archive (docs/DESIGN.md, "Span record").

Collectors that read a profiler after the fact (torch.profiler, ONNX Runtime's JSON, CUPTI)
produce ``TimedEvent`` values already mapped onto the host clock (``time.time_ns``); the tracer
turns them into spans. Finished spans of every kind end up as ``SpanRecord`` rows.
"""

from __future__ import annotations

import json
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any

from mlms.tracer.levels import TraceLevel

#: The archive's column order; ``attributes`` is stored as a JSON string.
COLUMNS: tuple[str, ...] = (
    "trace_id",
    "span_id",
    "parent_id",
    "level",
    "run",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "thread",
    "device",
    "stream",
    "correlation_id",
    "layer_index",
    "attributes",
)


@dataclass(frozen=True, slots=True)
class Details:
    """What a span record and a timed event know of an interval besides its name, kind, level and
    times: where it ran and the rest. Keyword-only, so that each subclass's own fields keep their
    places as positional arguments."""

    _: KW_ONLY
    thread: int | None = None
    device: str | None = None
    stream: int | None = None
    correlation_id: int | None = None
    layer_index: int | None = None
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanRecord(Details):
    trace_id: str
    span_id: str
    parent_id: str | None
    level: TraceLevel
    run: int
    name: str
    kind: str
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["level"] = int(self.level)
        row["attributes"] = json.dumps(self.attributes, sort_keys=True, default=str)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SpanRecord:
        values = {name: _none_if_nan(row.get(name)) for name in COLUMNS}
        values["level"] = TraceLevel(int(values["level"]))
        values["attributes"] = json.loads(values["attributes"] or "{}")
        for name in ("start_ns", "end_ns", "run"):
            values[name] = int(values[name])
        for name in ("thread", "stream", "correlation_id", "layer_index"):
            if values[name] is not None:
                values[name] = int(values[name])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class TimedEvent(Details):
    """An interval a collector observed, on the host clock, not yet a span.

    ``thread`` is the host thread the interval belongs to (for framework layers: the thread that
    called predict), used to find its parent by time containment.
    """

    name: str
    kind: str
    level: TraceLevel
    start_ns: int
    end_ns: int


def _none_if_nan(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    return value
