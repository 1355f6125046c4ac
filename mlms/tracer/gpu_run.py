"""The GPU part of one leveled run: cuDNN's log or CUPTI around the loop, counters apart.

The evaluation loop wraps its measured predicts in ``GpuRun`` (for levels ml_library and deeper
on a CUDA device) and calls ``emit`` once the framework's layer spans exist.

- ml_library: cuDNN calls (with the engine each convolution ran) under their layers. This
  collector runs in the ml_library run only: cuDNN formats a long text block per call, a cost
  that would distort the deeper runs' timings, and those runs see the same work as kernels.
- system_library / hardware: CUPTI; API calls go under their layers, GPU work under its call.
- full: as hardware, and each kernel carries the counters of the matching launch in the ncu
  counter run (its own process, before this run starts) and its place on the roofline.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from mlms.tracer.communication import KERNEL_KINDS
from mlms.tracer.counters import match_rows, roofline
from mlms.tracer.cupti import CuptiCollector
from mlms.tracer.hierarchy import innermost_containers
from mlms.tracer.join import add_gpu_spans, gpu_parents
from mlms.tracer.levels import TraceLevel
from mlms.tracer.ml_library import CudnnCapture, collect_cudnn
from mlms.tracer.ncu import CounterRun, collect
from mlms.tracer.peaks import peaks
from mlms.tracer.spans import TimedEvent
from mlms.tracer.tracer import Tracer


def gpu_run(predictor: Any, level: TraceLevel, batch: np.ndarray, warmup: int) -> GpuRun | None:
    """The GPU collectors of a run at ``level``, or None where there are none (CPU, shallow)."""
    if level < TraceLevel.ML_LIBRARY or not predictor.options.device.startswith("cuda"):
        return None
    return GpuRun(predictor, level, batch, warmup)


class GpuRun:
    def __init__(self, predictor: Any, level: TraceLevel, batch: np.ndarray, warmup: int):
        import torch

        self.level = level
        self.counters: CounterRun | None = None
        if level >= TraceLevel.FULL:
            # Before CUPTI starts here: the child has its own profiler and its own process.
            with tempfile.TemporaryDirectory(prefix="mlms-ncu-") as workdir:
                self.counters = collect(
                    model=predictor.manifest.name,
                    framework=predictor.framework,
                    asset_path=predictor.asset_path,
                    device=predictor.options.device,
                    batch=batch,
                    warmup=warmup,
                    workdir=Path(workdir),
                )
            self.peaks = peaks(predictor.options.device)
        device = torch.device(predictor.options.device)
        self._collector: Any = (
            collect_cudnn()
            if level == TraceLevel.ML_LIBRARY
            else CuptiCollector(
                min(level, TraceLevel.HARDWARE), sync=lambda: torch.cuda.synchronize(device)
            )
        )
        self.capture: Any = None

    def __enter__(self) -> GpuRun:
        self.capture = self._collector.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._collector.__exit__(*exc)

    def emit(self, tracer: Tracer, first: int) -> int:
        """Add this run's GPU spans under the spans recorded since ``first``; the dropped count."""
        containers = [
            r
            for r in tracer.records()[first:]
            if r.level in (TraceLevel.MODEL, TraceLevel.FRAMEWORK)
        ]
        if isinstance(self.capture, CudnnCapture):
            for library, why in self.capture.not_available().items():
                with tracer.span(
                    f"{library}: not available",
                    TraceLevel.ML_LIBRARY,
                    attributes={"mlms.unavailable": why},
                ):
                    pass
            calls = self.capture.events()
            parents = innermost_containers(containers, calls)
            tracer.add_events(calls, [containers[i] if i is not None else None for i in parents])
            return 0
        events = self.capture.events(self._collector.level)
        if self.counters is not None:
            models = [r for r in containers if r.level == TraceLevel.MODEL]
            events = with_counters(events, models, self.counters, self.peaks)
            with tracer.span(
                "counters (ncu)",
                TraceLevel.HARDWARE,
                kind="counters",
                attributes={
                    "ncu.wall_seconds": round(self.counters.wall_seconds, 3),
                    "ncu.latency_ms": self.counters.latency_ns / 1e6,
                    "ncu.kernels": len(self.counters.rows),
                    "ncu.metrics": self.counters.metrics,
                    **{f"peaks.{k}": v for k, v in self.peaks.to_dict().items()},
                },
            ):
                pass
        add_gpu_spans(tracer, containers, events)
        return self.capture.dropped


def with_counters(
    events: list[TimedEvent], models: list[Any], counters: CounterRun, device_peaks: Any
) -> list[TimedEvent]:
    """Kernel events with the counter figures of their launch, predict by predict."""
    api = [e for e in events if e.level == TraceLevel.SYSTEM_LIBRARY]
    kernels = [i for i, e in enumerate(events) if e.kind in KERNEL_KINDS]
    call_of = gpu_parents(api, [events[i] for i in kernels])
    model_of_call = innermost_containers(models, api)
    per_predict: dict[int, list[int]] = defaultdict(list)
    for kernel, call in zip(kernels, call_of, strict=True):
        if call is not None and model_of_call[call] is not None:
            per_predict[model_of_call[call]].append(kernel)
    names = [row.name for row in counters.rows]
    result = list(events)
    for launched in per_predict.values():
        launched.sort(key=lambda i: events[i].correlation_id or 0)
        matches = match_rows([events[i].name for i in launched], names)
        for position, row in zip(launched, matches, strict=True):
            if row is None:
                continue
            figures = counters.rows[row].figures()
            extra = {"counter.launch": row, **{f"counter.{k}": v for k, v in figures.items()}}
            extra |= {f"counter.{k}": v for k, v in roofline(figures, device_peaks).items()}
            event = events[position]
            result[position] = dataclasses.replace(event, attributes={**event.attributes, **extra})
    return result
