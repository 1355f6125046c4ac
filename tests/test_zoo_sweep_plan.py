"""The zoo_sweep plan's dry run as the check of its GPU run: its jax cells need what the GPU
run's need, so that a wheel the GPU image lacks fails here first."""

from __future__ import annotations

import sys

from benchmarks.gpu_kit import Kit, _pins, load_plan
from mlms.assets.keras_models import TRANSFORMERS
from mlms.catalog.zoo import get_model
from mlms.manifest import BuildSource


def _jax_models(dry: bool) -> list[str]:
    cells = load_plan("zoo_sweep").cells(Kit(dry=dry, python=sys.executable, gpus=("NVIDIA H200",)))
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
