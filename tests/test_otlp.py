"""OTLP export at layer volume: a burst of spans far beyond the SDK's default queue (2,048)
reaches a real OTLP/gRPC receiver on loopback, every one of them, and the sink counts them."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from mlms.rpc.otlp import otlp_sink
from tests.otlp_receiver import Receiver

BURST = 40_000  # about one profiled resnet50 run of 200 iterations


def test_a_layer_volume_burst_is_exported_without_loss() -> None:
    receiver = Receiver()
    try:
        sink = otlp_sink(receiver.endpoint, "test")
        provider = TracerProvider(resource=Resource.create({"service.name": "burst"}))
        provider.add_span_processor(sink)
        tracer = provider.get_tracer("test")
        # As Tracer.add_events does: spans with explicit times, ended back to back.
        for index in range(BURST):
            tracer.start_span(f"layer {index}", start_time=index).end(end_time=index + 1)
        provider.shutdown()  # flushes the queue
        assert sink.ended == BURST
        assert sink.exported == BURST and sink.lost == 0
        assert len(receiver.spans) == BURST
        assert len({s.name for s in receiver.spans}) == BURST  # none doubled
    finally:
        receiver.stop()
