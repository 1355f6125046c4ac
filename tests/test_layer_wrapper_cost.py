"""``benchmarks/layer_wrapper_cost.py``: its chain of leaves and the operators between them,
every call captured by the product's layer wrappers."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.layer_wrapper_cost import measure  # noqa: E402


def test_every_leaf_and_every_add_between_them_is_a_captured_layer_call() -> None:
    row = measure(leaves=5, every=2, rounds=1, block=3)
    assert row["layer_calls"] == 5 + 3  # three groups of at most two leaves, an add after each
    assert row["plain_us"] > 0 and row["captured_us"] > 0
