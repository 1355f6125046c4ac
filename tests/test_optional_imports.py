"""Frameworks import without the packages they load only because those are installed
(``mlms.assets.optional_imports``), and those packages import as usual afterwards."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mlms.assets.optional_imports import without


def test_a_hidden_package_is_not_installed_inside_and_imports_after(monkeypatch) -> None:
    # graphlib: a standard module nothing else here uses (the isolation tests probe another).
    monkeypatch.delitem(sys.modules, "graphlib", raising=False)
    with without(("graphlib", "json")), pytest.raises(ModuleNotFoundError, match="graphlib"):
        import graphlib
    import graphlib
    import json  # loaded before: left alone

    assert graphlib.TopologicalSorter and json.loads("1") == 1


@pytest.mark.parametrize(
    ("framework", "hidden"),
    [
        (
            "from mlms.assets.keras_models import import_tensorflow as load",
            "sklearn jax matplotlib",
        ),
        ("from mlms.predictors.jax_predictor import import_keras as load", "sklearn matplotlib"),
        ("from mlms.assets.transformers_import import import_transformers as load", "sklearn"),
    ],
)
def test_a_framework_loads_without_its_extras(framework: str, hidden: str) -> None:
    """In a fresh interpreter (TensorFlow never loads in the test process): after the
    framework's import none of ``hidden`` is loaded, and each imports when asked for."""
    code = (
        f"import sys; {framework}; load(); "
        f"loaded = [n for n in {hidden.split()!r} if n in sys.modules]; "
        "assert not loaded, loaded; "
        f"[__import__(n) for n in {hidden.split()!r}]"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
