"""The TensorFlow predictor on real Keras models on the CPU (tensorflow-cpu; no fakes)."""

from __future__ import annotations

import numpy as np
import pytest

from mlms.errors import UnsupportedFramework
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.predictors.base import PredictorOptions
from mlms.predictors.tensorflow_predictor import TensorFlowPredictor
from mlms.tracer.archive import read_spans
from mlms.tracer.layer_kinds import normalise_kind
from mlms.zoo.assets import AssetManager
from mlms.zoo.catalog import get_model
from mlms.zoo.digits import load_split
from mlms.zoo.keras_models import import_tensorflow, keras_model
from mlms.zoo.preprocess import preprocess
from tests.framework_checks import nested_layers


@pytest.fixture(scope="module")
def assets(store, mlms_home) -> AssetManager:
    return AssetManager(store, mlms_home / "cache")


def test_keras_twin_of_digits_computes_the_torch_function(assets: AssetManager) -> None:
    """The Keras digits model holds the torch weights, transposed: same logits, same labels."""
    import torch

    manifest = get_model("digits_cnn")
    module = assets.canonical_module(manifest)
    model = keras_model(module, manifest)
    batch = preprocess(list(load_split().test_images[:64]), manifest.inputs[0])
    with torch.inference_mode():
        expected = module(torch.from_numpy(batch)).numpy()
    actual = np.asarray(model(batch, training=False))
    np.testing.assert_allclose(actual, expected, atol=1e-4)
    assert (actual.argmax(1) == expected.argmax(1)).all()


def test_eval_on_tensorflow_nests_layer_spans_in_model_spans(store) -> None:
    request = EvaluationRequest(
        model="digits_cnn",
        framework="tensorflow",
        batch_sizes=[1, 4],
        iterations=3,
        warmup=1,
        min_seconds=0,
        trace_level="framework",
        inputs=["dataset"],
    )
    record = evaluate(request, store=store)
    assert record.framework.name == "tensorflow"
    assert record.framework.version.startswith("2.")
    assert record.accuracy is not None and record.accuracy.top1 > 0.95
    assert record.settings["mode"].startswith("tf.function")
    layers = nested_layers(read_spans(store, record.trace_id), {"conv", "pool", "gemm", "reshape"})
    # Names are the Keras layers (the torch module paths); attributes keep the TF op and node.
    assert {"to_nhwc", "4"} <= set(layers["name"])
    ops = set(layers["op_type"])
    assert any("Conv2D" in op for op in ops), ops


def test_keras_applications_model_runs_with_layer_events(assets: AssetManager) -> None:
    """A seeded keras.applications network (MobileNetV2) predicts and profiles by layer."""
    manifest = get_model("mobilenet_v2")
    asset = assets.ensure(manifest, "tensorflow")
    with TensorFlowPredictor(manifest, asset.path, PredictorOptions()) as predictor:
        batch = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
        logits = predictor.predict(batch)
        assert logits.shape == (2, 1000) and np.isfinite(logits).all()
        with predictor.profile_layers() as capture:
            predictor.predict(batch)
        layer_names = {layer.name for layer in predictor.model.layers}
    events = capture.events
    assert {"conv", "relu"} <= {e.kind for e in events}
    named = sum(e.name in layer_names for e in events)
    assert named >= 0.9 * len(events), [e.name for e in events if e.name not in layer_names]
    starts = [e.start_ns for e in events]
    assert starts == sorted(starts) and [e.layer_index for e in events] == list(range(len(events)))


def test_gpu_request_without_a_tensorflow_gpu_is_one_clear_error(assets: AssetManager) -> None:
    tf = import_tensorflow()
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow sees a GPU")
    manifest = get_model("digits_cnn")
    asset = assets.ensure(manifest, "tensorflow")
    with pytest.raises(UnsupportedFramework, match=r"device 'cuda:0' asked for.*0 GPU"):
        TensorFlowPredictor(manifest, asset.path, PredictorOptions(device="cuda:0"))


@pytest.mark.parametrize(
    ("op_type", "kind"),
    [
        ("_MklNativeFusedConv2D", "conv"),
        ("_MklNativePadWithFusedConv2D", "conv"),
        ("_FusedConv2D", "conv"),
        ("DepthwiseConv2dNative", "conv"),
        ("_MklNativeFusedDepthwiseConv2dNative", "conv"),
        ("FusedBatchNormV3", "batchnorm"),
        ("_MklFusedBatchNormV3", "batchnorm"),
        ("_MklNativeFusedMatMul", "gemm"),
        ("MatMul", "gemm"),
        ("Relu", "relu"),
        ("Relu6", "relu"),
        ("_MklNativeMaxPool", "pool"),
        ("AvgPool", "pool"),
        ("Mean", "pool"),
        ("AddV2", "add"),
        ("BiasAdd", "add"),
        ("ConcatV2", "concat"),
        ("Softmax", "softmax"),
        ("_MklTranspose", "reshape"),
        ("Reshape", "reshape"),
        ("Pad", "pad"),
        ("StridedSlice", "other"),
    ],
)
def test_tensorflow_op_types_normalise(op_type: str, kind: str) -> None:
    assert normalise_kind(op_type) == kind
