"""``benchmarks/sweep_agreement.py`` over two results folders laid out as the GPU run kit brings
them back (``store/sweeps/*.json``, stored by mlms's own ``save_sweep``)."""

from __future__ import annotations

import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import sweep_agreement  # noqa: E402
from mlms.evaluation.sweep import SweepCell, SweepSpec, SweepState, save_sweep  # noqa: E402
from mlms.store.local import LocalStore  # noqa: E402


def _folder(root: Path, name: str, sweeps: list[list[tuple]]) -> Path:
    """A results folder whose store holds ``sweeps`` (each a list of (model, batch size,
    state, p50)), the later ones created later."""
    store = LocalStore(root / name / "store")
    began = datetime(2026, 11, 29, tzinfo=UTC)
    for index, cells in enumerate(sweeps):
        spec = SweepSpec(models=sorted({c[0] for c in cells}), frameworks=["torch"],
                         batch_sizes=sorted({c[1] for c in cells}), hw=["h200"])  # fmt: skip
        save_sweep(store, SweepState(
            id=uuid.uuid4().hex, created_at=began + timedelta(hours=index), spec=spec,
            cells=[SweepCell(model=model, framework="torch", precision="fp32", batch_size=size,
                             hw="h200", evaluation_id=f"{model}{index}", state=state,
                             p50_ms=p50) for model, size, state, p50 in cells],
        ))  # fmt: skip
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
    with pytest.raises(SystemExit, match="has no store/sweeps/"):
        sweep_agreement.completed(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
