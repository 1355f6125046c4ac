"""Latency statistics with a confidence interval of the median and a spread warning."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from mlms.evaluation.record import LatencyStats

TRIM = 0.10  # trimmed mean drops the fastest and the slowest 10%
WIDE_IQR = 0.10  # interquartile range above 10% of the median: too noisy to trust


def latency_stats(samples_ns: Sequence[int]) -> LatencyStats:
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    p50, p90, p95, p99, q1, q3 = np.percentile(ms, [50, 90, 95, 99, 25, 75])
    lo, hi = median_ci95(ms)
    warning = None
    if len(ms) < 10:
        warning = f"only {len(ms)} iterations: percentiles above p90 are not meaningful"
    elif (q3 - q1) / p50 > WIDE_IQR:
        warning = (
            f"wide spread: interquartile range is {100 * (q3 - q1) / p50:.0f}% of the "
            "median; the machine may not be idle"
        )
    return LatencyStats(
        p50=float(p50),
        p90=float(p90),
        p95=float(p95),
        p99=float(p99),
        mean=float(ms.mean()),
        min=float(ms.min()),
        max=float(ms.max()),
        trimmed_mean=float(stats.trim_mean(ms, TRIM)),
        stdev=float(ms.std(ddof=1)) if len(ms) > 1 else 0.0,
        median_ci95=(lo, hi),
        warning=warning,
    )


def median_ci95(values: np.ndarray) -> tuple[float, float]:
    """Distribution-free 95% interval of the median from order statistics (binomial)."""
    ordered = np.sort(values)
    n = len(ordered)
    lo = int(stats.binom.ppf(0.025, n, 0.5))
    hi = int(stats.binom.isf(0.025, n, 0.5))
    return float(ordered[max(lo - 1, 0)]), float(ordered[min(hi, n - 1)])
