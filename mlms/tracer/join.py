"""Joining CUPTI records to the layers that caused them (docs/DESIGN.md, "Leveled measurement").

A kernel's (or copy's) parent is the API call with its CUPTI correlation id; an API call's
parent is the innermost layer (or model) span that contains it in time on the same thread.
Pure functions over anything with interval fields, so they run on the CPU from a fixture.

Layer latency on a GPU. The host runs ahead of the device: a layer's host interval holds only
its launches, and its kernels may run long after. A layer's latency is therefore taken on the
critical path: it starts when both the host has begun it and the device has finished the layer
before (``start = max(host_start, previous end)``), and ends when both its host work and its last
kernel are done (``end = max(host_end, last kernel end, start)``). Layers then tile the model's
time without overlap, their kernels (one stream, launched no earlier than the layer began) fit
inside, and the non-GPU time (latency minus kernel time, XSP's measure) is the time the device
waited for the host or the framework.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from mlms.tracer.hierarchy import innermost_containers
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import SpanRecord, TimedEvent
from mlms.tracer.tracer import Tracer


class Correlated(Protocol):
    @property
    def correlation_id(self) -> int | None: ...


def gpu_parents(api: Sequence[Correlated], gpu: Sequence[Correlated]) -> list[int | None]:
    """For each GPU activity, the index of the API call with its correlation id, or None."""
    by_id: dict[int, int] = {}
    for index, call in enumerate(api):
        if call.correlation_id is not None:
            by_id.setdefault(call.correlation_id, index)
    return [
        by_id.get(item.correlation_id) if item.correlation_id is not None else None for item in gpu
    ]


@dataclass
class LayerGpu:
    """One layer execution with the GPU work it launched."""

    name: str
    layer_index: int | None
    thread: int | None
    host_start_ns: int
    host_end_ns: int
    start_ns: int = 0  # critical-path interval (module docstring)
    end_ns: int = 0
    kernels: list[int] = field(default_factory=list)  # indices into the GPU activities
    gpu_ns: int = 0
    last_gpu_end_ns: int = 0

    @property
    def latency_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def non_gpu_ns(self) -> int:
        return self.latency_ns - self.gpu_ns


def layer_gpu(
    layers: Sequence[TimedEvent | SpanRecord],
    api: Sequence[TimedEvent | SpanRecord],
    gpu: Sequence[TimedEvent | SpanRecord],
) -> list[LayerGpu]:
    """Each layer execution with its kernels, their total time and its critical-path latency.

    ``layers`` must not nest on a thread (leaf layers, as the framework collectors emit).
    """
    result = [
        LayerGpu(layer.name, layer.layer_index, layer.thread, layer.start_ns, layer.end_ns)
        for layer in layers
    ]
    call_layer = innermost_containers(layers, api)
    for gpu_index, call in enumerate(gpu_parents(api, gpu)):
        owner = call_layer[call] if call is not None else None
        if owner is None:
            continue
        item, activity = result[owner], gpu[gpu_index]
        item.kernels.append(gpu_index)
        item.gpu_ns += activity.end_ns - activity.start_ns
        item.last_gpu_end_ns = max(item.last_gpu_end_ns, activity.end_ns)
    by_thread: dict[int | None, list[LayerGpu]] = defaultdict(list)
    for item in result:
        by_thread[item.thread].append(item)
    for items in by_thread.values():
        previous_end = 0
        for item in sorted(items, key=lambda i: i.host_start_ns):
            item.start_ns = max(item.host_start_ns, previous_end)
            item.end_ns = max(item.host_end_ns, item.last_gpu_end_ns, item.start_ns)
            previous_end = item.end_ns
    return result


def add_gpu_spans(
    tracer: Tracer, containers: Sequence[SpanRecord], events: Sequence[TimedEvent]
) -> None:
    """Emit CUPTI events as spans: API calls under their layer or model, GPU work under its call.

    API calls outside every container (another thread, between predicts) and GPU work without a
    recorded call fall under the span current at the call (the leveled run's span).
    """
    api = [e for e in events if e.level == TraceLevel.SYSTEM_LIBRARY]
    gpu = [e for e in events if e.level == TraceLevel.HARDWARE]
    parents = innermost_containers(containers, api)
    before = len(tracer.records())
    tracer.add_events(api, [containers[i] if i is not None else None for i in parents])
    calls = {
        r.correlation_id: r
        for r in tracer.records()[before:]
        if r.level == TraceLevel.SYSTEM_LIBRARY and r.correlation_id is not None
    }
    tracer.add_events(gpu, [calls.get(e.correlation_id) for e in gpu])
