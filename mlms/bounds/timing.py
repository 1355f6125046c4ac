"""Timing one layer implementation in isolation, many times.

On the CPU a call's time is its wall time (``perf_counter_ns`` around it).

On a GPU a call's time is the sum of the durations of the kernels it launched, read from
torch.profiler (Kineto, CUPTI's activity records): the same quantity as a layer's kernel time in
a hardware-level evaluation, so a bound and the layer it bounds are measured alike. Host time
around the launches would count launch latency and the gaps between kernels, which for a small
layer at batch size 1 exceed its kernels; CUDA events would count the gaps too. Each call is
wrapped in a profiler range and followed by a synchronize, so its kernels are the ones linked to
that range whatever launched them (torch, cuDNN's frontend, cuBLAS).
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Calls before the timed ones: autotuning, lazy initialisation and caches happen here.
WARMUP = 3
_MARK = "mlms.bench:"


@dataclass(frozen=True)
class Timed:
    median_ms: float
    min_ms: float
    repeats: int


def summary(samples: list[float]) -> Timed:
    return Timed(statistics.median(samples), min(samples), len(samples))


def time_cpu(jobs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, Timed]:
    timed: dict[str, Timed] = {}
    for label, call in jobs.items():
        for _ in range(WARMUP):
            call()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter_ns()
            call()
            samples.append((time.perf_counter_ns() - start) / 1e6)
        timed[label] = summary(samples)
    return timed


def time_gpu(torch: Any, jobs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, Timed]:
    """Kernel time per call of each job; a job that launched no kernel at all is left out
    (its work was not seen, not free)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    for call in jobs.values():
        for _ in range(WARMUP):
            call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for label, call in jobs.items():
            for repeat in range(repeats):
                with record_function(f"{_MARK}{label}#{repeat}"):
                    call()
                    torch.cuda.synchronize()
    samples: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():
        if event.name.startswith(_MARK):
            label = event.name[len(_MARK) :].rsplit("#", 1)[0]
            samples[label].append(event.device_time_total / 1e3)
    return {
        label: summary(values)
        for label, values in samples.items()
        if len(values) == repeats and min(values) > 0
    }
