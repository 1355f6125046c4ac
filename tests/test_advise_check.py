"""``benchmarks/advise_check.py``'s paired quality: the recommended configuration and the
sweep's best measured alternately, so that a host whose speed drifts between rounds slows both
alike. The measurements are a function of the round here: only a GPU host drifts like this.
And the compile mode it starts each framework's compiler with before either side's clock."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.advise_check import _first_mode, paired_quality  # noqa: E402


def _drifting(true: dict[str, float], drift: list[float], inverse: bool):
    """``measure(config)``: its true value slowed by the round's drift (a latency grows, a
    throughput shrinks); two calls make a round."""
    calls: list[str] = []

    def measure(config: str) -> float:
        factor = drift[len(calls) // 2]
        calls.append(config)
        return true[config] / factor if inverse else true[config] * factor

    return measure, calls


def test_a_drifting_host_cancels_for_latency_and_the_order_alternates() -> None:
    measure, calls = _drifting({"chosen": 5.5, "best": 5.0}, [1.0, 1.6, 1.0, 1.3], inverse=False)
    assert paired_quality(measure, "chosen", "best", 4, lower=True) == pytest.approx(1.1)
    assert calls == ["chosen", "best", "best", "chosen"] * 2


def test_throughput_reads_the_best_over_the_recommended() -> None:
    measure, _ = _drifting({"chosen": 900.0, "best": 1000.0}, [1.0, 2.0, 1.5], inverse=True)
    assert paired_quality(measure, "chosen", "best", 3, lower=False) == pytest.approx(1000 / 900)


def test_rounds_without_a_value_are_left_out() -> None:
    # Round 0 (a, b): a had no energy reading; round 1 (b, a): b 3.0, a 2.0.
    values = iter([None, 2.0, 3.0, 2.0])
    assert paired_quality(lambda c: next(values), "a", "b", 2, lower=True) == pytest.approx(2 / 3)
    assert paired_quality(lambda c: None, "a", "b", 2, lower=True) is None


def test_the_compiler_is_started_with_the_first_mode_named_that_the_framework_has() -> None:
    named = ["none", "default", "reduce-overhead"]
    assert _first_mode("torch", named) == "default"
    assert _first_mode("torch", ["none", "reduce-overhead"]) == "reduce-overhead"
    assert _first_mode("torch", None) == "default"  # none named: the space has its modes
    assert _first_mode("torch", ["none"]) is None
    assert _first_mode("onnxruntime", named) is None
