"""The H100 capture in ``data/cupti_resnet18_bs4.json.gz``, replayed as a traced run makes it.

``benchmarks/gpu_validation.py --parts fixture`` recorded it on an H100 (torch 2.11, CUDA 13,
cuDNN 9.19): three traced predicts of resnet18 at batch size 4 (CUPTI activity records on
CUPTI's clock with their clock map, the framework's layer events and the model spans), the ncu
rows of the same batch, this GPU's measured peaks, and the cuDNN API-log messages of one more
predict. The helpers run those records through the same functions the runner uses.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

from mlms.tracer.cupti import ClockMap, thread_key, to_events
from mlms.tracer.hierarchy import innermost_containers
from mlms.tracer.join import add_gpu_spans
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import SpanRecord, TimedEvent
from mlms.tracer.tracer import Tracer

FIXTURE = Path(__file__).parent / "data" / "cupti_resnet18_bs4.json.gz"


def load() -> dict[str, Any]:
    return json.loads(gzip.decompress(FIXTURE.read_bytes()))


def cupti_events(capture: dict[str, Any]) -> list[TimedEvent]:
    """API calls and GPU work on the host clock, on the predict thread."""
    thread = capture["meta"]["predict_thread"]
    clock = ClockMap(**capture["cupti"]["clock"])
    return to_events(capture["cupti"]["records"], clock, threads={thread_key(thread): thread})


def timed_events(payload: list[dict[str, Any]]) -> list[TimedEvent]:
    """Events stored as dicts (layers, for example) back as ``TimedEvent``."""
    return [TimedEvent(**{**item, "level": TraceLevel(item["level"])}) for item in payload]


def layer_events(capture: dict[str, Any]) -> list[TimedEvent]:
    return timed_events(capture["layers"])


def model_events(capture: dict[str, Any], attributes: dict[str, Any] | None = None):
    return [
        TimedEvent(
            "model", "model", TraceLevel.MODEL, m["start_ns"], m["end_ns"], thread=m["thread"],
            attributes=dict(attributes or {}),
        )
        for m in capture["models"]
    ]  # fmt: skip


def traced_run(
    run: int,
    level: TraceLevel,
    models: list[TimedEvent],
    layers: list[TimedEvent],
    cupti: list[TimedEvent],
    *more: tuple[list[TimedEvent], list[TimedEvent], list[TimedEvent]],
) -> list[SpanRecord]:
    """The spans of one leveled run: model -> layer -> API call -> GPU work, through the SDK.

    ``more`` holds further (models, layers, cupti) collections of the same run, emitted one
    after another as the runner emits one batch size after another.
    """
    tracer = Tracer(TraceLevel.FULL)
    with tracer.run(run, level), tracer.span(f"run {run}", TraceLevel.APPLICATION):
        for batch_models, batch_layers, batch_cupti in ((models, layers, cupti), *more):
            before = len(tracer.records())
            tracer.add_events(batch_models, [None] * len(batch_models))
            model_spans = [r for r in tracer.records()[before:] if r.level == TraceLevel.MODEL]
            parents = innermost_containers(model_spans, batch_layers)
            tracer.add_events(batch_layers, [model_spans[i] for i in parents])
            containers = [r for r in tracer.records()[before:] if r.level in (2, 3)]
            add_gpu_spans(tracer, containers, batch_cupti)
    return tracer.records()


def shifted(events: list[TimedEvent], ns: int) -> list[TimedEvent]:
    """The same events ``ns`` later (a second collection with the same correlation ids)."""
    return [dataclasses.replace(e, start_ns=e.start_ns + ns, end_ns=e.end_ns + ns) for e in events]


def full_run(capture: dict[str, Any]) -> list[SpanRecord]:
    """The capture's predicts as a ``full`` run (run 2) archives them: model -> layer -> API
    call -> GPU work with the ncu counters joined, and the span a full run leaves beside its
    counters with the peaks they were placed on."""
    from mlms.tracer.counters import Peaks, parse_ncu_csv
    from mlms.tracer.gpu_run import with_counters
    from mlms.tracer.ncu import CounterRun

    models = model_events(capture, {"mlms.batch_size": capture["meta"]["batch_size"]})
    counters = CounterRun(
        rows=parse_ncu_csv(capture["ncu_csv"]), latency_ns=0, wall_seconds=0.0, metrics=[]
    )
    cupti = with_counters(cupti_events(capture), models, counters, Peaks(**capture["peaks"]))
    records = traced_run(2, TraceLevel.FULL, models, layer_events(capture), cupti)
    peaks = {f"peaks.{key}": value for key, value in capture["peaks"].items()}
    counters_span = dataclasses.replace(
        records[0],
        span_id="c" * 16,
        name="counters (ncu)",
        kind="counters",
        level=TraceLevel.HARDWARE,
        attributes=peaks,
    )
    return [*records, counters_span]
