"""Latency statistics with a confidence interval of the median and a spread warning.

Every process that evaluates (or imports a trace) computes these, so SciPy loads only where it
is needed: the median's interval is a sum of binomial coefficients, exact in Python integers up
to ``EXACT_UP_TO`` samples (where ``import scipy.special`` alone would take 0.25-0.35 s); beyond,
its binomial distribution functions come from ``scipy.special``, not ``scipy.stats`` (1.1 s to
import). ``tests/test_measurement.py`` checks both against ``scipy.stats``."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import numpy as np

from mlms.evaluation.record import LatencyStats

TRIM = 0.10  # trimmed mean drops the fastest and the slowest 10%
WIDE_IQR = 0.10  # interquartile range above 10% of the median: too noisy to trust
#: Sample counts whose median interval is summed exactly (integers of n bits: 7 ms at 10,000,
#: growing as n squared).
EXACT_UP_TO = 10_000


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
        trimmed_mean=trimmed_mean(ms),
        stdev=float(ms.std(ddof=1)) if len(ms) > 1 else 0.0,
        median_ci95=(lo, hi),
        warning=warning,
    )


def trimmed_mean(values: np.ndarray) -> float:
    """The mean without the ``TRIM`` share of samples at each end, rounded down to whole
    samples (as ``scipy.stats.trim_mean``)."""
    cut = int(TRIM * len(values))
    return float(np.sort(values)[cut : len(values) - cut].mean())


def median_ci95(values: np.ndarray) -> tuple[float, float]:
    """Distribution-free 95% interval of the median from order statistics (binomial)."""
    ordered = np.sort(values)
    n = len(ordered)
    # X ~ Binomial(n, 1/2), the samples below the median: lo = its 2.5 % quantile (the least k
    # with P(X <= k) >= 0.025, scipy.stats.binom.ppf), hi = the least k with P(X > k) <= 0.025
    # (binom.isf).
    if n <= EXACT_UP_TO:
        lo = _exact_lower_quantile(n)
        # X is symmetric, P(X > k) = P(X <= n - k - 1), and no sum of 2**-n is exactly 1/40
        hi = n - lo
    else:
        from scipy.special import bdtr, bdtrc

        # Both functions are monotone in k, so a bisection over 0..n finds them.
        lo = bisect_left(range(n + 1), 0.025, key=lambda k: bdtr(k, n, 0.5))
        hi = bisect_left(range(n + 1), -0.025, key=lambda k: -bdtrc(k, n, 0.5))
    return float(ordered[max(lo - 1, 0)]), float(ordered[min(hi, n - 1)])


def _exact_lower_quantile(n: int) -> int:
    """The least k with P(X <= k) >= 0.025 for X ~ Binomial(n, 1/2), in integers: the least k
    with 40 * (C(n, 0) + ... + C(n, k)) >= 2**n."""
    whole, coefficient, below = 1 << n, 1, 0
    for k in range(n + 1):
        below += coefficient
        if 40 * below >= whole:
            return k
        coefficient = coefficient * (n - k) // (k + 1)
    return n
