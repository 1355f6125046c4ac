"""OTLP span export beside the Parquet archive, sized so that layer-volume traces fit.

Layer spans are added in one burst when a profiled run ends (``Tracer.add_events``): a
resnet50 run of 200 iterations is ~35,000 spans at once. The SDK's default queue (2,048) would
drop most of them, so the queue holds 2**18 spans (a few hundred MB at worst, only while a burst
drains) and batches are 4,096 spans (~2 MB, under the collector's 4 MiB gRPC default).
``CountingSink`` counts what it was handed and what the collector accepted, so a loss is
reported instead of silent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from mlms.tracer.tracer import OsRandomIds

log = logging.getLogger(__name__)

MAX_QUEUE_SIZE = 2**18
MAX_EXPORT_BATCH_SIZE = 4096
SCHEDULE_DELAY_MS = 500
EXPORT_TIMEOUT_MS = 30_000


class _CountingExporter(SpanExporter):
    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        with self._lock:
            if result == SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingSink(SpanProcessor):
    """A batch processor in front of ``exporter`` that knows how many spans it lost."""

    def __init__(self, exporter: SpanExporter, label: str) -> None:
        self.label = label
        self._exporter = _CountingExporter(exporter)
        self._batch = BatchSpanProcessor(
            self._exporter,
            max_queue_size=MAX_QUEUE_SIZE,
            schedule_delay_millis=SCHEDULE_DELAY_MS,
            max_export_batch_size=MAX_EXPORT_BATCH_SIZE,
            export_timeout_millis=EXPORT_TIMEOUT_MS,
        )
        self.ended = 0
        self._lock = threading.Lock()

    @property
    def exported(self) -> int:
        return self._exporter.exported

    @property
    def lost(self) -> int:
        return self.ended - self._exporter.exported

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._batch.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:  # spans end on several threads
            self.ended += 1
        self._batch.on_end(span)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._batch.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._batch.shutdown()
        if self.lost:
            log.warning(
                "%s: exported %d of %d spans over OTLP; %d lost",
                self.label,
                self.exported,
                self.ended,
                self.lost,
            )
        else:
            log.info("%s: exported %d spans over OTLP", self.label, self.exported)


def otlp_sink(endpoint: str, label: str) -> CountingSink:
    """A sink sending to an OTLP/gRPC collector at ``endpoint`` (``http://HOST:PORT``)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return CountingSink(OTLPSpanExporter(endpoint=endpoint, insecure=True), label)


def otlp_sinks(endpoint: str | None, label: str) -> tuple[SpanProcessor, ...]:
    """A fresh sink per evaluation (``Tracer.shutdown`` shuts its processors down)."""
    return (otlp_sink(endpoint, label),) if endpoint else ()


def process_provider(service_name: str, endpoint: str | None) -> TracerProvider:
    """The provider for a process's own spans (client, server, agent), never the global one."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name}),
        id_generator=OsRandomIds(),  # ids apart from `random`, which libraries and tests reseed
    )
    for sink in otlp_sinks(endpoint, service_name):
        provider.add_span_processor(sink)
    return provider
