"""digits_cnn on torch, ONNX Runtime, TensorFlow and MXNet from the same trained weights.

The torch module is trained once; every other framework's artifact is exported from it and
loaded natively (ONNX through torch.export, Keras and Gluon layer by layer). On the whole held-out
split the four must give the same top-1 label on at least 99.9% of the samples, and accuracies
within 0.5 points. MXNet runs in its own virtualenv (scripts/setup.sh makes it); TensorFlow in a
process of its own, as mlms runs it (``mlms.isolation``).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlms.assets.digits import load_split
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.frameworks import own_interpreter
from mlms.isolation import call_in_own_process
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.tasks.preprocess import preprocess

IN_PROCESS = ("torch", "onnxruntime")
MXNET_SCRIPT = """
import json, sys
import numpy as np
from mlms.isolation import call_in_own_process
from mlms.predictors.base import PredictorOptions
from mlms.predictors.mxnet_predictor import MXNetPredictor
from mlms.catalog.zoo import get_model
asset, batch_file = sys.argv[1:]
with MXNetPredictor(get_model("digits_cnn"), asset, PredictorOptions()) as predictor:
    labels = predictor.predict(np.load(batch_file)).argmax(axis=1)
print(json.dumps(labels.tolist()))
"""


def _mxnet_labels(assets: AssetManager, images: np.ndarray, tmp: Path) -> np.ndarray:
    python = own_interpreter("mxnet")
    if python is not None and not python.exists():
        pytest.fail(f"MXNet's virtualenv is missing ({python}): run scripts/setup.sh")
    asset = assets.ensure(get_model("digits_cnn"), "mxnet")
    np.save(tmp / "images.npy", images)
    result = subprocess.run(
        [
            str(python or sys.executable),
            "-c",
            MXNET_SCRIPT,
            str(asset.path),
            str(tmp / "images.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return np.array(json.loads(result.stdout.strip().splitlines()[-1]))


def _labels(framework: str, asset: Path, images: np.ndarray) -> np.ndarray:
    predictor = predictor_class(framework)(get_model("digits_cnn"), asset, PredictorOptions())
    with predictor:
        return predictor.predict(images).argmax(axis=1)


def test_digits_agree_across_the_four_frameworks(store, mlms_home, tmp_path: Path) -> None:
    manifest = get_model("digits_cnn")
    assets = AssetManager(store, mlms_home / "cache")
    split = load_split()
    images = preprocess(list(split.test_images), manifest.inputs[0])
    labels: dict[str, np.ndarray] = {}
    for framework in IN_PROCESS:
        labels[framework] = _labels(framework, assets.ensure(manifest, framework).path, images)
    labels["tensorflow"] = call_in_own_process(
        _labels,
        "tensorflow",
        assets.ensure(manifest, "tensorflow").path,
        images,
        what="the TensorFlow predictor",
    )
    labels["mxnet"] = _mxnet_labels(assets, images, tmp_path)

    accuracy = {name: float((found == split.test_labels).mean()) for name, found in labels.items()}
    assert min(accuracy.values()) > 0.95, accuracy
    assert max(accuracy.values()) - min(accuracy.values()) <= 0.005, accuracy
    for first, second in itertools.combinations(labels, 2):
        agreement = float((labels[first] == labels[second]).mean())
        assert agreement >= 0.999, (first, second, agreement, accuracy)
