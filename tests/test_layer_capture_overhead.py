"""``benchmarks/layer_capture_overhead.py``'s GPU times from a CUPTI capture: overlapping
activities counted once, durations through the capture's clock map (CUPTI's ticks need not be
nanoseconds), per predict of the block; the slowdown paired round by round; and the switch
interval and the paused garbage collector two configurations run with; the page faults a block
takes on its thread; the rounds a launch outlasted the device's work.
The capture is built by hand: CUPTI needs a GPU."""

from __future__ import annotations

import gc
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.layer_capture_overhead import (  # noqa: E402
    collector_paused,
    gpu_busy,
    gpu_times,
    host_bound_rounds,
    minor_faults,
    pooled,
    round_ratios,
    rounds_per_batch,
    switch_interval,
)
from mlms.tracer.cupti import ClockMap, CuptiCapture  # noqa: E402


def _record(kind: str, start: int, end: int) -> dict:
    return {"kind": kind, "name": kind, "start": start, "end": end}


RECORDS = [
    _record("kernel", 0, 4_000_000),
    _record("kernel", 3_000_000, 6_000_000),  # starts before the first ends
    _record("memcpy", 8_000_000, 9_000_000),
    _record("runtime", 0, 20_000_000),  # an API call: host time, not the GPU's
]


def test_overlapping_activities_count_once() -> None:
    assert gpu_busy(RECORDS) == pytest.approx(7.0)
    assert gpu_busy(list(reversed(RECORDS))) == pytest.approx(7.0)


@pytest.mark.parametrize("tick_ns", [1.0, 1 / 2.1])
def test_times_are_host_milliseconds_per_predict(tick_ns: float) -> None:
    """At 2.1 ticks a nanosecond (a 2.1 GHz cycle counter) the same records last 1/2.1 as long."""
    capture = CuptiCapture(records=RECORDS, clock=ClockMap(0, 0, 21_000_000, round(21e6 * tick_ns)))
    times = gpu_times(capture, block=2)
    assert times["cupti_tick_ns"] == pytest.approx(tick_ns)
    assert times["gpu_busy_ms"] == pytest.approx(7.0 * tick_ns / 2)
    assert times["gpu_summed_ms"] == pytest.approx(8.0 * tick_ns / 2)
    assert times["kernel_ms"] == pytest.approx(7.0 * tick_ns / 2)
    assert times["kernels_per_predict"] == 1.0
    assert (times["runtime_per_predict"], times["driver_per_predict"]) == (0.5, 0.0)


def test_the_switch_interval_holds_for_the_block_only() -> None:
    before = sys.getswitchinterval()
    with pytest.raises(RuntimeError), switch_interval(1e-4):
        assert sys.getswitchinterval() == pytest.approx(1e-4)
        raise RuntimeError("the block failed")
    assert sys.getswitchinterval() == before


def test_the_collector_is_paused_for_the_block_only() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("the block failed")
    assert gc.isenabled()


def test_a_slow_stretch_of_the_host_cancels_round_by_round() -> None:
    """Round 1 runs 1.5x slow for both: paired per round the slowdown stays 1.1, where the p50
    over all rounds would read it as 1.5 for a configuration that got more slow rounds."""
    plain = {0: [10.0, 10.0], 1: [15.0, 15.0], 2: [10.0, 10.0]}
    traced = {0: [11.0, 11.0], 1: [16.5, 16.5], 2: [11.0, 11.0], 3: [99.0]}  # 3: no plain
    assert round_ratios(traced, plain) == pytest.approx([1.1, 1.1, 1.1])
    assert sorted(pooled(traced)) == [11.0] * 4 + [16.5] * 2 + [99.0]


def test_rounds_are_one_number_for_every_batch_size_or_one_each() -> None:
    assert rounds_per_batch("12", [1, 16, 64]) == [12, 12, 12]
    assert rounds_per_batch("36,12,12", [1, 16, 64]) == [36, 12, 12]
    for bad in ("36,12", "0", "x", "12,,12"):
        with pytest.raises(ValueError, match=rf"--rounds '{bad}': expected .* \(1,16,64\)"):
            rounds_per_batch(bad, [1, 16, 64])


def test_a_thread_counts_the_pages_it_first_writes() -> None:
    """8 MiB mapped anew and written a byte a page: a fault a page, on this thread."""
    import mmap

    page = mmap.PAGESIZE
    with mmap.mmap(-1, 8 << 20) as fresh:
        before = minor_faults()
        for offset in range(0, len(fresh), page):
            fresh[offset] = 1
        faulted = minor_faults() - before
    assert faulted >= 0.9 * (8 << 20) // page


def test_a_round_is_host_bound_where_its_launch_outlasts_the_device() -> None:
    """Three rounds against 6.8 ms of device work: the middle one's launch p50 is past it."""
    launches = {0: [5.0, 5.1, 9.0], 1: [7.0, 7.2, 4.0], 2: [6.0, 6.7, 6.9], 3: []}
    assert host_bound_rounds(launches, 6.8) == 1
    assert host_bound_rounds(launches, 4.0) == 3
    assert math.isnan(host_bound_rounds(launches, float("nan")))  # no device time: the CPU
    assert math.isnan(host_bound_rounds({}, 6.8))  # nothing timed
