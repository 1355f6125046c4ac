"""Every model of the zoo builds and runs in both main frameworks: torch from torchvision
(``weights=None``, seeded) or transformers' configurations, ONNX Runtime from the same weights
exported with ``torch.export``, and TensorFlow where the manifest lists it (the transformers'
Keras twins hold the torch weights, converted by KerasHub). A deeper stack of another zoo
model's layers (resnet152 of resnet50's) is checked through that model.
All must give the same logits for one input, which checks the export, not only that it ran.
TensorFlow runs in a fresh interpreter, never in the test process (``mlms.isolation``)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from mlms.assets.keras_models import TRANSFORMERS
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import BUILTIN_DIR, get_model, labels_of
from mlms.evaluation.inputs import open_inputs
from mlms.isolation import call_in_own_process
from mlms.manifest import ModelManifest
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from tests.representatives import assert_each_stands_for_the_larger

#: The transformers' TensorFlow twins are KerasHub backbones; scripts/setup.sh installs KerasHub
#: outside the tensorflow extra (mlms.assets.keras_models says why).
HAS_KERAS_HUB = importlib.util.find_spec("keras_hub") is not None


def _predict(framework: str, manifest: ModelManifest, asset: Path, batch: np.ndarray):
    with predictor_class(framework)(manifest, asset, PredictorOptions("cpu")) as model:
        return np.asarray(model.predict(batch), dtype=np.float64)


def _frameworks(manifest: ModelManifest) -> list[str]:
    """torch, ONNX Runtime, and TensorFlow where the Keras twin holds the torch weights."""
    listed = {f.name for f in manifest.frameworks}
    transformer = getattr(manifest.sources[0], "builder", None) in TRANSFORMERS
    tensorflow = "tensorflow" in listed and transformer and HAS_KERAS_HUB
    return ["torch", "onnxruntime", *(["tensorflow"] if tensorflow else [])]


#: The zoo's deeper stacks of another of its models' layers, and that model: the export of
#: the same layer classes is checked on the smaller one (tests/representatives.py).
DEEPER = {"resnet34": "resnet18", "resnet101": "resnet50", "resnet152": "resnet50",
          "vgg19": "vgg16"}  # fmt: skip
#: The zoo's manifests of their own but the deeper stacks, and a timm network for the tables'
#: families (tests/test_zoo_tables.py builds every model; the ONNX export of each table model
#: was checked once, and where it fails the manifest says why).
AGREEING = sorted({*(p.stem for p in BUILTIN_DIR.glob("*.yaml")), "deit_tiny"} - DEEPER.keys())


def test_a_deeper_stack_has_the_layers_of_the_model_that_stands_for_it() -> None:
    assert_each_stands_for_the_larger(DEEPER)


@pytest.mark.slow
@pytest.mark.parametrize("name", AGREEING)
def test_model_builds_and_torch_and_onnxruntime_agree(name: str, store, mlms_home: Path) -> None:
    manifest = get_model(name)
    manager = AssetManager(store, mlms_home / "cache")
    tokens = manifest.inputs[0].layout == "tokens"
    # A short sequence keeps the transformers quick; the export's sequence axis is dynamic.
    source = open_inputs(manifest, ["synthetic"], seed=0, seq_len=8 if tokens else None)
    batch = source.take(0, 1).tensor
    logits = {}
    # ONNX Runtime's asset first: with no torch weights stored yet, one builder makes both.
    for framework in sorted(_frameworks(manifest), key=lambda f: f == "torch"):
        asset = manager.ensure(manifest, framework)
        if framework == "tensorflow":
            logits[framework] = call_in_own_process(
                _predict, framework, manifest, asset.path, batch, what="the TensorFlow predictor"
            )
        else:
            logits[framework] = _predict(framework, manifest, asset.path, batch)
    torch_logits, ort_logits = logits["torch"], logits["onnxruntime"]
    assert torch_logits.shape == ort_logits.shape and torch_logits.shape[0] == 1
    next_token = manifest.outputs[0].type == "next_token"
    classes = manifest.inputs[0].vocab_size if next_token else len(labels_of(manifest))
    assert torch_logits.shape[1] == classes, torch_logits.shape
    assert np.isfinite(torch_logits).all() and np.ptp(torch_logits) > 0  # not a constant output
    scale = float(np.abs(torch_logits).max())
    for framework, other in logits.items():
        np.testing.assert_allclose(
            other, torch_logits, rtol=1e-3, atol=1e-3 * scale, err_msg=framework
        )
        assert other.argmax() == torch_logits.argmax(), framework


@pytest.mark.slow
def test_transformer_on_tensorflow_without_keras_hub_is_one_clear_error(
    tmp_path, monkeypatch
) -> None:
    """keras-hub hidden (a package of that name that fails to import, first on the path of this
    process and of the children it starts), as on a machine that installed only the extras; a
    store of its own, where no other test left the asset built."""
    from mlms.errors import AssetError
    from mlms.store.local import LocalStore

    hidden = tmp_path / "hidden" / "keras_hub"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    monkeypatch.syspath_prepend(str(hidden.parent))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hidden.parent), *sys.path]))
    monkeypatch.delitem(sys.modules, "keras_hub", raising=False)
    manager = AssetManager(LocalStore(tmp_path / "store"), tmp_path / "cache")
    with pytest.raises(AssetError, match=r"needs keras-hub, which is not installed") as info:
        manager.ensure(get_model("bert_base"), "tensorflow")
    assert "\n" not in str(info.value)
