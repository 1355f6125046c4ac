"""Statistics and the per-device queue: docs/DESIGN.md, "Measurement rules"."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mlms.evaluation.device_lock import exclusive_device
from mlms.evaluation.stats import latency_stats, median_ci95, trimmed_mean


def test_latency_stats_on_known_samples() -> None:
    samples_ms = np.arange(1, 101, dtype=float)  # 1..100 ms
    stats = latency_stats((samples_ms * 1e6).astype(int))
    assert stats.p50 == pytest.approx(50.5)
    assert stats.p99 == pytest.approx(99.01)
    assert (stats.min, stats.max, stats.mean) == (1.0, 100.0, 50.5)
    assert stats.trimmed_mean == pytest.approx(50.5)  # symmetric: trimming keeps the centre
    assert stats.median_ci95[0] < 50.5 < stats.median_ci95[1]
    assert stats.warning and "spread" in stats.warning  # IQR is ~99% of the median


def test_trimmed_mean_drops_outliers() -> None:
    samples = np.full(50, 10e6)
    samples[0] = 1000e6
    stats = latency_stats(samples.astype(int))
    assert stats.mean > 20 and stats.trimmed_mean == pytest.approx(10.0)
    assert stats.warning is None


def test_few_iterations_are_flagged() -> None:
    assert "only 3 iterations" in latency_stats([1_000_000, 1_100_000, 1_050_000]).warning


def test_median_interval_covers_the_median_of_a_noisy_sample() -> None:
    rng = np.random.default_rng(0)
    lo, hi = median_ci95(rng.normal(100, 5, 200))
    assert lo < 100 < hi and hi - lo < 3


def test_trimmed_mean_and_median_interval_are_scipy_stats() -> None:
    from scipy import stats

    for n in [*range(1, 400), 1_000, 4_097, 65_536, 1_000_003]:
        values = np.random.default_rng(n).lognormal(1.0, 0.5, n)
        ordered = np.sort(values)
        lo, hi = int(stats.binom.ppf(0.025, n, 0.5)), int(stats.binom.isf(0.025, n, 0.5))
        expected = (ordered[max(lo - 1, 0)], ordered[min(hi, n - 1)])
        assert median_ci95(values) == expected, n
        assert trimmed_mean(values) == pytest.approx(stats.trim_mean(values, 0.1), rel=1e-12), n


def test_a_second_evaluation_of_a_busy_device_waits(tmp_path) -> None:
    waited: list[float] = []
    attempting = threading.Event()

    def second() -> None:
        attempting.set()
        with exclusive_device(tmp_path, "cpu") as seconds:
            waited.append(seconds)

    with exclusive_device(tmp_path, "cpu") as first_wait:
        assert first_wait < 1.0
        thread = threading.Thread(target=second)
        thread.start()
        assert attempting.wait(10)
        held_from = time.perf_counter()
        time.sleep(0.3)  # hold the device for a known stretch while the second one queues
        assert not waited
        held = time.perf_counter() - held_from
    thread.join(10)
    assert waited and waited[0] >= held * 0.9
