"""Every model of the zoo builds and runs in both main frameworks: torch from torchvision
(``weights=None``, seeded) or transformers' configurations, ONNX Runtime from the same weights
exported with ``torch.export``.
Both must give the same logits for one input, which checks the export, not only that it ran."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlms.evaluation.inputs import open_inputs
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.zoo.assets import AssetManager
from mlms.zoo.catalog import all_models, get_model, labels_of


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(m.name for m in all_models()))
def test_model_builds_and_torch_and_onnxruntime_agree(name: str, store, mlms_home: Path) -> None:
    manifest = get_model(name)
    manager = AssetManager(store, mlms_home / "cache")
    tokens = manifest.inputs[0].layout == "tokens"
    # A short sequence keeps the transformers quick; the export's sequence axis is dynamic.
    source = open_inputs(manifest, ["synthetic"], seed=0, seq_len=8 if tokens else None)
    batch = source.take(0, 1).tensor
    logits = {}
    for framework in ("torch", "onnxruntime"):
        asset = manager.ensure(manifest, framework)
        with predictor_class(framework)(manifest, asset.path, PredictorOptions("cpu")) as model:
            logits[framework] = np.asarray(model.predict(batch), dtype=np.float64)
    torch_logits, ort_logits = logits["torch"], logits["onnxruntime"]
    assert torch_logits.shape == ort_logits.shape and torch_logits.shape[0] == 1
    next_token = manifest.outputs[0].type == "next_token"
    classes = manifest.inputs[0].vocab_size if next_token else len(labels_of(manifest))
    assert torch_logits.shape[1] == classes, torch_logits.shape
    assert np.isfinite(torch_logits).all() and np.ptp(torch_logits) > 0  # not a constant output
    scale = float(np.abs(torch_logits).max())
    np.testing.assert_allclose(ort_logits, torch_logits, rtol=1e-3, atol=1e-3 * scale)
    assert ort_logits.argmax() == torch_logits.argmax()
