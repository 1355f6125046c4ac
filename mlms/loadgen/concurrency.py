"""A closed-loop concurrency sweep, measured the way perf_analyzer measures.

At each level N, N threads send predict after predict; time is cut into windows, and a level
is done when its last three windows agree (throughput and mean latency each within 10% of
their average), or after the most windows allowed, flagged unstable. The level's point is the
average of those last windows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mlms.errors import InvalidArgument
from mlms.loadgen.record import CurvePoint
from mlms.loadgen.targets import PredictTarget, synthetic_samples

STABLE_WINDOWS = 3
STABILITY = 0.10


@dataclass(frozen=True)
class SweepSettings:
    levels: tuple[int, ...]
    window_s: float = 1.0
    max_windows: int = 10
    samples: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.window_s <= 0:
            raise InvalidArgument(f"window {self.window_s}s: expected a positive duration")
        if self.max_windows < STABLE_WINDOWS:
            raise InvalidArgument(
                f"max windows {self.max_windows}: expected at least {STABLE_WINDOWS}, the "
                "windows that must agree"
            )


def parse_levels(text: str) -> tuple[int, ...]:
    """``"1:16"`` or ``"1:16:4"`` (start:end[:step], end included, like perf_analyzer's
    --concurrency-range) -> the levels."""
    parts = text.split(":")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise InvalidArgument(
            f"concurrency {text!r}: expected START:END[:STEP] of positive integers, like 1:16"
        )
    start, end, step = (int(p) for p in (*parts, "1")[:3])
    if end < start:
        raise InvalidArgument(f"concurrency {text!r}: the end {end} is below the start {start}")
    return tuple(range(start, end + 1, step))


@dataclass(frozen=True)
class Window:
    throughput_per_s: float
    latencies_ns: np.ndarray


def is_stable(windows: Sequence[Window]) -> bool:
    """The last windows' throughput and mean latency each within 10% of their average."""
    if len(windows) < STABLE_WINDOWS:
        return False
    last = windows[-STABLE_WINDOWS:]
    if any(len(w.latencies_ns) == 0 for w in last):
        return False
    for values in (
        [w.throughput_per_s for w in last],
        [float(w.latencies_ns.mean()) for w in last],
    ):
        average = sum(values) / len(values)
        if any(abs(v - average) > STABILITY * average for v in values):
            return False
    return True


def sweep(
    target: PredictTarget,
    settings: SweepSettings,
    on_point: Callable[[CurvePoint], None] = lambda _point: None,
) -> list[CurvePoint]:
    # Each sample a batch of one.
    pool = synthetic_samples(target.info, settings.samples, settings.seed)[:, None]
    points = []
    for level in settings.levels:
        point = _measure(target, pool, level, settings)
        on_point(point)
        points.append(point)
    return points


def _measure(
    target: PredictTarget, pool: np.ndarray, concurrency: int, settings: SweepSettings
) -> CurvePoint:
    done: list[tuple[int, int]] = []  # (end, latency) in ns; list.append is atomic
    stop = threading.Event()
    failure: list[BaseException] = []

    def client(offset: int) -> None:
        i = offset
        while not stop.is_set():
            start = time.perf_counter_ns()
            try:
                target.predict(pool[i % len(pool)])
            except BaseException as exc:
                failure.append(exc)
                stop.set()
                return
            end = time.perf_counter_ns()
            done.append((end, end - start))
            i += concurrency

    threads = [
        threading.Thread(target=client, args=(n,), name=f"sweep-{concurrency}-{n}", daemon=True)
        for n in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    windows: list[Window] = []
    window_ns = int(settings.window_s * 1e9)
    begin = time.perf_counter_ns()
    try:
        while len(windows) < settings.max_windows and not is_stable(windows):
            # The wait is the measurement window itself; stop is set only by a failure.
            if stop.wait(settings.window_s):
                break
            end = begin + window_ns
            latencies = np.array([lat for at, lat in list(done) if begin <= at < end])
            windows.append(Window(len(latencies) / settings.window_s, latencies))
            begin = end
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if failure:
        raise failure[0]
    last = windows[-STABLE_WINDOWS:]
    latencies_ms = np.concatenate([w.latencies_ns for w in last]) / 1e6
    if len(latencies_ms) == 0:
        raise InvalidArgument(
            f"no predict finished within {settings.window_s}s windows at concurrency "
            f"{concurrency}: use a longer --window"
        )
    p50, p90, p99 = np.percentile(latencies_ms, [50, 90, 99])
    return CurvePoint(
        concurrency=concurrency,
        throughput_per_s=float(np.mean([w.throughput_per_s for w in last])),
        p50_ms=float(p50),
        p90_ms=float(p90),
        p99_ms=float(p99),
        mean_ms=float(latencies_ms.mean()),
        windows=len(windows),
        stable=is_stable(windows),
    )
