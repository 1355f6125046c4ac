"""The zoo_sweep plan's dry run as the check of its GPU run: its jax cells need what the GPU
run's need, so that a wheel the GPU image lacks fails here first."""

from __future__ import annotations

import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.gpu_kit import Kit, _pins, load_plan
from mlms.assets.keras_models import TRANSFORMERS
from mlms.catalog.zoo import get_model
from mlms.evaluation.sweep import SweepCell, SweepSpec, SweepState, save_sweep
from mlms.manifest import BuildSource
from mlms.store.local import LocalStore


def _kit(dry: bool, results: Path | None = None) -> Kit:
    return Kit(dry=dry, python=sys.executable, gpus=("NVIDIA H200",), results=results)


def _jax_models(dry: bool, results: Path | None = None) -> list[str]:
    cells = load_plan("zoo_sweep").cells(_kit(dry, results))
    sweeps = [cell.argv for cell in cells if cell.name.startswith("jax_")]
    # The interpreter's own -m comes first: the models follow the sweep's.
    return [
        name
        for argv in sweeps
        for name in argv[argv.index("-m", argv.index("sweep")) + 1].split(",")
    ]


def _on_keras_hub(model: str) -> bool:
    """Whether the model's Keras twin is a KerasHub backbone: those need keras-hub, which the
    GPU image lacks, where the others need Keras alone."""
    source = next(s for s in get_model(model).sources if isinstance(s, BuildSource))
    return source.builder in TRANSFORMERS


def test_the_dry_jax_cells_build_both_kinds_of_keras_twin_the_gpu_run_builds() -> None:
    kinds = {_on_keras_hub(model) for model in _jax_models(dry=False)}
    assert kinds == {True, False}
    assert {_on_keras_hub(model) for model in _jax_models(dry=True)} == kinds


def test_the_plan_carries_keras_hub_for_its_transformers() -> None:
    pins = _pins({"base", *load_plan("zoo_sweep").wheels})
    assert any(pin.startswith("keras-hub==") for pin in pins)


def _sweep_file(folder: Path, cells: list[tuple[str, str, int, str]]) -> None:
    """A jax sweep of ``cells`` (model, hw, batch size, state) stored in the results folder's
    store by mlms's own ``save_sweep``."""
    models, hws, sizes = ({cell[i] for cell in cells} for i in (0, 1, 2))
    spec = SweepSpec(models=sorted(models), frameworks=["jax"], batch_sizes=sorted(sizes),
                     hw=sorted(hws))  # fmt: skip
    save_sweep(LocalStore(folder / "store"), SweepState(
        id=uuid.uuid4().hex, created_at=datetime.now(UTC), spec=spec,
        cells=[SweepCell(model=model, framework="jax", batch_size=size, hw=hw,
                         evaluation_id=model, state=state) for model, hw, size, state in cells],
    ))  # fmt: skip


def test_jax_cells_leave_out_the_models_the_results_folder_has(tmp_path: Path) -> None:
    """A chunk cut after some of its models runs again for the others only: a model counts
    as done with a completed cell at every batch size on this GPU kind."""
    _sweep_file(tmp_path, [("resnet50", "h200", size, "completed") for size in (1, 16, 64)])
    _sweep_file(tmp_path, [("bert_base", "h200", 1, "completed"), ("bert_base", "h200", 16,
                "completed"), ("bert_base", "h200", 64, "running"),
                ("vgg16", "h100", 1, "completed"), ("vgg16", "h100", 16, "completed"),
                ("vgg16", "h100", 64, "completed")])  # fmt: skip
    everything = _jax_models(dry=False)
    left = _jax_models(dry=False, results=tmp_path)
    assert left == [model for model in everything if model != "resnet50"]
    cells = load_plan("zoo_sweep").cells(_kit(dry=False, results=tmp_path))
    names = [cell.name for cell in cells if cell.name.startswith("jax_")]
    assert names[0] == f"jax_{left[0]}" == "jax_bert_base"
