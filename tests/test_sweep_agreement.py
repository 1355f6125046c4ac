"""``benchmarks/sweep_agreement.py`` over two results folders laid out as the GPU run kit brings
them back (``store/sweeps/*.json``, the fields ``mlms sweep`` stores)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import sweep_agreement  # noqa: E402


def _folder(root: Path, name: str, sweeps: list[list[tuple]]) -> Path:
    folder = root / name / "store" / "sweeps"
    folder.mkdir(parents=True)
    for index, cells in enumerate(sweeps):
        rows = [
            {"model": model, "framework": "torch", "precision": "fp32", "batch_size": size,
             "hw": "h200", "state": state, "p50_ms": p50, "finished_at": f"2026-11-29T0{index}"}
            for model, size, state, p50 in cells
        ]  # fmt: skip
        (folder / f"{index}.json").write_text(json.dumps({"cells": rows}))
    return root / name


def test_ratios_per_batch_size_over_the_cells_both_completed(tmp_path: Path) -> None:
    """A cell swept twice in one folder keeps its later p50; one that failed in either run or
    exists in one only is left out."""
    earlier = _folder(tmp_path, "earlier", [
        [("a", 1, "completed", 99.0), ("b", 1, "completed", 2.0), ("a", 64, "completed", 10.0),
         ("c", 1, "completed", 1.0)],
        [("a", 1, "completed", 1.0)],
    ])  # fmt: skip
    later = _folder(tmp_path, "later", [
        [("a", 1, "completed", 1.02), ("b", 1, "completed", 3.0), ("a", 64, "completed", 8.0),
         ("c", 1, "failed", None), ("d", 1, "completed", 5.0)],
    ])  # fmt: skip
    summary, both = sweep_agreement.agreement(
        sweep_agreement.completed(earlier), sweep_agreement.completed(later)
    )
    ratios = {(row.model, row.batch_size): row.ratio for row in both.itertuples()}
    assert ratios == {("a", 1): pytest.approx(1.02), ("a", 64): pytest.approx(0.8),
                      ("b", 1): pytest.approx(1.5)}  # fmt: skip
    first = summary[summary.batch_size == 1].iloc[0]
    assert first.cells == 2 and first["median"] == pytest.approx(1.26)
    assert first.within_5 == 0.5 and first.within_10 == 0.5


def test_a_folder_without_completed_cells_is_one_line(tmp_path: Path) -> None:
    empty = _folder(tmp_path, "empty", [[("a", 1, "failed", None)]])
    with pytest.raises(SystemExit, match="holds no completed sweep cell"):
        sweep_agreement.completed(empty)
