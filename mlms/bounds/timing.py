"""Timing one layer implementation in isolation, many times.

On the CPU a call's time is its wall time (``perf_counter_ns`` around it).

On a GPU a call's time is the sum of the durations of the kernels it launched, read from
torch.profiler (Kineto, CUPTI's activity records): the same quantity as a layer's kernel time in
a hardware-level evaluation, so a bound and the layer it bounds are measured alike. Host time
around the launches would count launch latency and the gaps between kernels, which for a small
layer at batch size 1 exceed its kernels; CUDA events would count the gaps too. Each call is
wrapped in a profiler range and followed by a synchronize, so its kernels are the ones linked to
that range whatever launched them (torch, cuDNN's frontend, cuBLAS).

Before each call its producer writes its input again (``LayerCall.prime``), as just before it
inside a model, and the priming's own kernels are not counted. Where the input stands in the
cache decides a memory-bound layer's time: on the H100 (50 MB of L2) at batch size 64,
mobilenet_v2's 192->32 1x1 convolution (a 38.5 MB input) took 18.2 us in the model, 23.3 us
alone on an input it only read before, 17.9 us after its producer; resnet50's layer1.1 ReLU
34.6, 35.6 and 33.6 us (``benchmarks/bound_probe.py``).
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Calls (primed) before the timed ones: autotuning, lazy initialisation and caches happen here.
WARMUP = 3
#: Back-to-back calls per GPU sample, as a layer runs inside a model: the device never idles
#: between them (after an idle gap the first kernels ran a few percent slower on the H100).
BACK_TO_BACK = 4
#: Screening drops an implementation slower than this many times the fastest seen so far.
SCREEN_CUTOFF = 1.5
#: How a layer is timed, part of the perfdb's key: timings taken otherwise are not reused.
METHOD = "kernel time; the producer rerun before each call; 4 back to back"
_MARK = "mlms.bench:"
_PRIME = "mlms.prime"


@dataclass(frozen=True)
class LayerCall:
    """One implementation of a layer: ``run`` computes it; ``prime`` leaves its input as the
    layer finds it in a model, just written by its producer."""

    run: Callable[[], Any]
    prime: Callable[[], None] = lambda: None


def rewriting(tensors: tuple[Any, ...]) -> Callable[[], None]:
    """A priming that rewrites ``tensors`` in place, values unchanged: the stand-in for a
    producer that cannot be rerun (and for a cuDNN engine bound to one input tensor)."""
    # Multiplying by a one of the tensor's own type: no type promotion, bool masks included.
    ones = tuple(tensor.new_ones(()) for tensor in tensors)

    def prime() -> None:
        for tensor, one in zip(tensors, ones, strict=True):
            tensor.mul_(one)

    return prime


@dataclass(frozen=True)
class Timed:
    median_ms: float
    min_ms: float
    repeats: int


def summary(samples: list[float]) -> Timed:
    return Timed(statistics.median(samples), min(samples), len(samples))


def time_cpu(jobs: dict[str, LayerCall], repeats: int) -> dict[str, Timed]:
    timed: dict[str, Timed] = {}
    for label, call in jobs.items():
        for _ in range(WARMUP):
            call.prime()
            call.run()
        samples = []
        for _ in range(repeats):
            call.prime()
            start = time.perf_counter_ns()
            call.run()
            samples.append((time.perf_counter_ns() - start) / 1e6)
        timed[label] = summary(samples)
    return timed


def screen_gpu(torch: Any, jobs: dict[str, LayerCall]) -> dict[str, float]:
    """A quick look at every implementation: the device time of one call between CUDA events
    (launch gaps included, good enough to rank), stopping early for one far slower than the
    fastest so far. Label -> milliseconds; the ones left out were too slow or failed."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    seen: dict[str, float] = {}
    best = float("inf")
    for label, call in jobs.items():
        times = []
        for _ in range(2):
            start.record()
            call.run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
            if times[-1] > SCREEN_CUTOFF * best:
                break
        else:
            seen[label] = min(times)
            best = min(best, seen[label])
    return {label: ms for label, ms in seen.items() if ms <= SCREEN_CUTOFF * best}


def time_gpu(torch: Any, jobs: dict[str, LayerCall], repeats: int) -> dict[str, Timed]:
    """GPU time per call of each job: the durations of the kernels (and copies) that ran
    within the call's profiler range, less those of its priming. A job that ran nothing
    on the GPU is left out (its work was not seen, not free)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    for call in jobs.values():
        for _ in range(WARMUP):  # the priming warms up too: its first call may load and plan
            call.prime()
            call.run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for label, call in jobs.items():
            for repeat in range(repeats):
                with record_function(f"{_MARK}{label}#{repeat}"):
                    for _ in range(BACK_TO_BACK):
                        with record_function(_PRIME):
                            call.prime()
                        call.run()
                    torch.cuda.synchronize()
    # Joined by time, not by Kineto's links: a kernel belongs to the range it started in
    # (each range ends after a synchronize, so its kernels are done inside it), whoever
    # launched it, unless it started inside a priming's span on the GPU's timeline (Kineto's
    # GPU-side copy of the annotation). Links were no good for the priming either: the first
    # priming in a profile was linked twice its kernels.
    ranges, priming, gpu = [], [], []
    for event in prof.events():
        on_gpu = event.device_type == DeviceType.CUDA
        if event.name.startswith(_MARK):
            if not on_gpu:  # the GPU-side copy of an annotation is no work of its own
                ranges.append(event)
        elif event.name == _PRIME:
            if on_gpu:
                priming.append(event)
        elif on_gpu:
            gpu.append(event)
    ranges.sort(key=lambda e: e.time_range.start)
    in_range, in_priming = _spans(ranges), _spans(priming)
    busy = [0.0] * len(ranges)
    for event in gpu:
        start = event.time_range.start
        if in_priming(start) is None and (index := in_range(start)) is not None:
            busy[index] += event.time_range.end - start
    samples: dict[str, list[float]] = defaultdict(list)
    for event, us in zip(ranges, busy, strict=True):
        samples[event.name[len(_MARK) :].rsplit("#", 1)[0]].append(us / 1e3 / BACK_TO_BACK)
    return {
        label: summary(values)
        for label, values in samples.items()
        if len(values) == repeats and min(values) > 0
    }


def _spans(events: list[Any]) -> Callable[[float], int | None]:
    """For events that do not overlap: the index (in start order) of the one a time falls in."""
    events = sorted(events, key=lambda e: e.time_range.start)
    starts = [e.time_range.start for e in events]

    def find(at: float) -> int | None:
        index = bisect.bisect_right(starts, at) - 1
        return index if index >= 0 and at <= events[index].time_range.end else None

    return find
