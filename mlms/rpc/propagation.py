"""W3C trace context (``traceparent``/``tracestate``) in gRPC metadata.

The W3C propagator is used directly, not the global one, so that mlms never depends on (or
changes) process-wide OpenTelemetry configuration.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()


def outgoing_metadata(context: otel_context.Context | None = None) -> list[tuple[str, str]]:
    """Metadata carrying the span that is current in ``context`` (or now) to the callee."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    return sorted(carrier.items())


def incoming_context(
    servicer_context: grpc.ServicerContext | Sequence[tuple[str, str]],
) -> otel_context.Context:
    """The caller's trace context from a call's metadata (empty when it sent none)."""
    metadata = (
        servicer_context.invocation_metadata()
        if isinstance(servicer_context, grpc.ServicerContext)
        else servicer_context
    )
    carrier = {key: value for key, value in metadata if isinstance(value, str)}
    return _W3C.extract(carrier)
