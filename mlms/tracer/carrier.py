"""A trace context as W3C ``traceparent``/``tracestate`` pairs: what carries a trace across a
process (gRPC metadata, a spawned child's arguments).

The W3C propagator is used directly, not the global one, so that mlms never depends on (or
changes) process-wide OpenTelemetry configuration.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()


def context_pairs(context: otel_context.Context | None = None) -> list[tuple[str, str]]:
    """The pairs that carry the span current in ``context`` (or now) to another process."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    return sorted(carrier.items())


def context_from_pairs(pairs: Iterable[tuple[str, object]]) -> otel_context.Context:
    """The trace context that ``pairs`` carry (empty when they carry none); values that are not
    text (binary gRPC metadata) are skipped."""
    return _W3C.extract({key: value for key, value in pairs if isinstance(value, str)})
