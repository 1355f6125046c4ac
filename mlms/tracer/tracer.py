"""The tracer: leveled spans on the OpenTelemetry SDK.

One ``Tracer`` per evaluation, with its own ``TracerProvider`` (never the global one). A span
whose level is above the active level is a shared no-op context: it costs one comparison.
Finished spans become ``SpanRecord`` rows through ``RecordCollector``; other sinks (OTLP) are
ordinary OpenTelemetry span processors passed in.

Leveled runs (docs/DESIGN.md, "Leveled measurement"): ``with tracer.run(k, level):`` makes
``level`` the active level and tags every span started inside with run ``k``.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import SpanRecord, TimedEvent

LEVEL = "mlms.level"
RUN = "mlms.run"
KIND = "mlms.kind"
THREAD = "thread.id"
_RESERVED = {
    LEVEL: "level",
    RUN: "run",
    KIND: "kind",
    THREAD: "thread",
    "mlms.device": "device",
    "mlms.stream": "stream",
    "mlms.correlation_id": "correlation_id",
    "mlms.layer_index": "layer_index",
}
_NOOP: AbstractContextManager[None] = nullcontext()


class RecordCollector(SpanProcessor):
    """Keeps every finished span as a ``SpanRecord`` (the archive's rows)."""

    def __init__(self) -> None:
        self._records: list[SpanRecord] = []
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        attributes = dict(span.attributes or {})
        fields = {field: attributes.pop(key, None) for key, field in _RESERVED.items()}
        record = SpanRecord(
            trace_id=f"{span.context.trace_id:032x}",
            span_id=f"{span.context.span_id:016x}",
            parent_id=f"{span.parent.span_id:016x}" if span.parent else None,
            level=TraceLevel(fields.pop("level") or 0),
            run=int(fields.pop("run") or 0),
            name=span.name,
            kind=str(fields.pop("kind") or ""),
            start_ns=int(span.start_time or 0),
            end_ns=int(span.end_time or 0),
            attributes={k: _plain(v) for k, v in attributes.items()},
            **fields,
        )
        with self._lock:
            self._records.append(record)

    def records(self) -> list[SpanRecord]:
        with self._lock:
            return list(self._records)


class OsRandomIds(IdGenerator):
    """Trace and span ids from the operating system's randomness.

    OpenTelemetry's default draws them from the ``random`` module, whose state anything in the
    process may seed (``keras.utils.set_random_seed``, a test runner that reseeds each test):
    two evaluations would then get the same trace id and one archive would replace the other."""

    def generate_span_id(self) -> int:
        while (span_id := secrets.randbits(64)) == trace.INVALID_SPAN_ID:
            pass
        return span_id

    def generate_trace_id(self) -> int:
        while (trace_id := secrets.randbits(128)) == trace.INVALID_TRACE_ID:
            pass
        return trace_id

    def is_trace_id_random(self) -> bool:
        return True


class Tracer:
    def __init__(
        self,
        level: TraceLevel,
        *,
        resource: Mapping[str, str] | None = None,
        processors: Sequence[SpanProcessor] = (),
        parent: otel_context.Context | None = None,
    ) -> None:
        self.level = level
        self._active = level
        self._run = 0
        self._parent = parent
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": "mlms", **(resource or {})}),
            id_generator=OsRandomIds(),
        )
        self._collector = RecordCollector()
        self._provider.add_span_processor(self._collector)
        for processor in processors:
            self._provider.add_span_processor(processor)
        self._otel = self._provider.get_tracer("mlms")

    @property
    def active_level(self) -> TraceLevel:
        return self._active

    def enabled(self, level: TraceLevel) -> bool:
        return self._active != TraceLevel.NO_TRACE and level <= self._active

    @contextmanager
    def run(self, index: int, level: TraceLevel) -> Iterator[None]:
        """Collect at ``level`` (never above the tracer's own) as leveled run ``index``."""
        previous = self._active, self._run
        self._active, self._run = TraceLevel(min(level, self.level)), index
        try:
            yield
        finally:
            self._active, self._run = previous

    def span(
        self,
        name: str,
        level: TraceLevel,
        *,
        kind: str = "",
        attributes: Mapping[str, Any] | None = None,
    ) -> AbstractContextManager[Any]:
        if self._active == TraceLevel.NO_TRACE or level > self._active:
            return _NOOP
        values = {LEVEL: int(level), RUN: self._run, KIND: kind, THREAD: threading.get_ident()}
        if attributes:
            values.update(attributes)
        context = self._parent if trace.get_current_span() is trace.INVALID_SPAN else None
        return self._otel.start_as_current_span(name, context=context, attributes=values)

    def add_events(
        self, events: Sequence[TimedEvent], parents: Sequence[SpanRecord | None]
    ) -> None:
        """Spans with explicit timestamps for events a profiler saw, under the given parents."""
        for event, parent in zip(events, parents, strict=True):
            if not self.enabled(event.level):
                continue
            context = None
            if parent is not None:
                span_context = SpanContext(
                    trace_id=int(parent.trace_id, 16),
                    span_id=int(parent.span_id, 16),
                    is_remote=False,
                    trace_flags=TraceFlags(TraceFlags.SAMPLED),
                )
                context = trace.set_span_in_context(NonRecordingSpan(span_context))
            # An event belongs to the leveled run of the span it happened in.
            run = parent.run if parent is not None else self._run
            attributes = {LEVEL: int(event.level), RUN: run, KIND: event.kind}
            for key, value in (
                ("thread.id", event.thread),
                ("mlms.device", event.device),
                ("mlms.stream", event.stream),
                ("mlms.correlation_id", event.correlation_id),
                ("mlms.layer_index", event.layer_index),
            ):
                if value is not None:
                    attributes[key] = value
            attributes.update({k: _otel_value(v) for k, v in event.attributes.items()})
            span = self._otel.start_span(
                event.name, context=context, attributes=attributes, start_time=event.start_ns
            )
            span.end(end_time=event.end_ns)

    def records(self) -> list[SpanRecord]:
        return self._collector.records()

    def shutdown(self) -> None:
        """Flush and stop every processor (OTLP exporters send what they hold)."""
        self._provider.shutdown()


def _otel_value(value: Any) -> Any:
    """OpenTelemetry attributes take scalars or flat lists of one type; encode the rest."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        kinds = {type(v) for v in value}
        if len(kinds) <= 1:
            return list(value)
    import json

    return json.dumps(value, default=str)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str) and value[:1] in "[{":
        import json

        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
