"""W3C trace context (``traceparent``/``tracestate``) in gRPC metadata."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from opentelemetry import context as otel_context

from mlms.tracer.carrier import context_from_pairs, context_pairs


def outgoing_metadata(context: otel_context.Context | None = None) -> list[tuple[str, str]]:
    """Metadata carrying the span that is current in ``context`` (or now) to the callee."""
    return context_pairs(context)


def incoming_context(
    servicer_context: grpc.ServicerContext | Sequence[tuple[str, str]],
) -> otel_context.Context:
    """The caller's trace context from a call's metadata (empty when it sent none)."""
    metadata = (
        servicer_context.invocation_metadata()
        if isinstance(servicer_context, grpc.ServicerContext)
        else servicer_context
    )
    return context_from_pairs(metadata)
