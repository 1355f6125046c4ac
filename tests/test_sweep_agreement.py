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
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest, RunConditions  # noqa: E402
from mlms.evaluation.record_store import save_record  # noqa: E402
from mlms.evaluation.runner import evaluate  # noqa: E402
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


@pytest.fixture(scope="module")
def template(store) -> EvaluationRecord:
    """A real record (digits_cnn, batch 1), the model of the folders' records."""
    request = EvaluationRequest(model="digits_cnn", framework="onnxruntime", batch_sizes=[1],
                                iterations=2, warmup=1, min_seconds=0.0)  # fmt: skip
    return evaluate(request, store=store)


def _records(folder: Path, template: EvaluationRecord, clocks: dict[str, float]) -> None:
    """A record in ``folder`` for each evaluation id of ``clocks``: its batch size 1 ran at
    that SM clock (of 1980 MHz) while the hypervisor took 3 % of the host."""
    store = LocalStore(folder / "store")
    for evaluation_id, mhz in clocks.items():
        seen = RunConditions(sm_clock_mhz=mhz, sm_clock_max_mhz=1980, cpu_steal=0.03)
        results = [template.results[0].model_copy(update={"conditions": seen})]
        save_record(store, template.model_copy(update={"id": evaluation_id, "results": results}))


def test_the_moves_beside_the_clock(tmp_path: Path, template, monkeypatch, capsys) -> None:
    """Cells whose p50 moved as their SM clock did: the clock ratio is the p50's inverse and
    the report says the clock explains the moves; a cell without a record has none."""
    earlier = _folder(tmp_path, "earlier", [[("a", 1, "completed", 1.0), ("b", 1, "completed",
                      2.0), ("c", 1, "completed", 4.0), ("e", 1, "completed", 1.0)]])  # fmt: skip
    later = _folder(tmp_path, "later", [[("a", 1, "completed", 2.0), ("b", 1, "completed", 2.0),
                    ("c", 1, "completed", 3.0), ("e", 1, "completed", 1.0)]])  # fmt: skip
    _records(earlier, template, {"a0": 1980.0, "b0": 1980.0, "c0": 1500.0})
    _records(later, template, {"a0": 990.0, "b0": 1980.0, "c0": 2000.0})
    _, both = sweep_agreement.agreement(
        sweep_agreement.completed(earlier), sweep_agreement.completed(later)
    )
    assert both.set_index("model")["clock ratio"].to_dict() == pytest.approx(
        {"a": 0.5, "b": 1.0, "c": 2000 / 1500, "e": float("nan")}, nan_ok=True
    )
    assert both.set_index("model")["steal_pct later"].to_dict() == pytest.approx(
        {"a": 3.0, "b": 3.0, "c": 3.0, "e": float("nan")}, nan_ok=True
    )
    monkeypatch.setattr(sys, "argv", ["sweep_agreement", str(earlier), str(later)])
    sweep_agreement.main()
    printed = capsys.readouterr().out
    assert "sm_mhz earlier" in printed and "steal_pct later" in printed
    assert "log SM clock ratio, 3 cells with both: correlation -1.00" in printed


def test_a_folder_without_completed_cells_is_one_line(tmp_path: Path) -> None:
    empty = _folder(tmp_path, "empty", [[("a", 1, "failed", None)]])
    with pytest.raises(SystemExit, match="holds no completed sweep cell"):
        sweep_agreement.completed(empty)
    with pytest.raises(SystemExit, match="has no store/sweeps/"):
        sweep_agreement.completed(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
