"""The TensorFlow predictor on real Keras models on the CPU (tensorflow-cpu; no fakes).

TensorFlow never loads in the test process: its global LLVM symbols crash torch's compiler
stack in whichever later test builds an optimizer or starts torch.profiler (``mlms.isolation``).
The tests' own TensorFlow parts run in one interpreter of their own for the module
(``tensorflow_process``: TensorFlow loads once); evaluations run in the embedded client's
TensorFlow agent, as mlms does.
"""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mlms.analysis.compare import run_options
from mlms.assets.digits import load_split
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.client import EmbeddedClient
from mlms.errors import InvalidArgument, UnsupportedFramework
from mlms.evaluation.record import EvaluationRequest
from mlms.predictors.base import PredictorOptions
from mlms.store.base import ObjectStore
from mlms.tasks.preprocess import preprocess
from mlms.tracer.archive import read_spans
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent
from tests.framework_checks import nested_layers


@pytest.fixture(scope="module")
def tensorflow_process() -> Iterator[ProcessPoolExecutor]:
    """A fresh interpreter (spawned: nothing of this process comes along) that runs the
    module's TensorFlow functions one after another."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as process:
        yield process


def _keras_and_torch_logits(store: ObjectStore, cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """Logits of the Keras twin of digits and of its torch module, on 64 held-out images."""
    import torch

    from mlms.assets.keras_models import keras_model

    manifest = get_model("digits_cnn")
    module = AssetManager(store, cache).canonical_module(manifest)
    model = keras_model(module, manifest)
    batch = preprocess(list(load_split().test_images[:64]), manifest.inputs[0])
    with torch.inference_mode():
        expected = module(torch.from_numpy(batch)).numpy()
    return np.asarray(model(batch, training=False)), expected


def test_keras_twin_of_digits_computes_the_torch_function(
    store, mlms_home, tensorflow_process
) -> None:
    """The Keras digits model holds the torch weights, transposed: same logits, same labels."""
    actual, expected = tensorflow_process.submit(
        _keras_and_torch_logits, store, mlms_home / "cache"
    ).result()
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
    record = EmbeddedClient(store).evaluate(request)  # in a tensorflow agent of its own
    assert record.framework.name == "tensorflow"
    assert record.framework.version.startswith("2.")
    assert record.accuracy is not None and record.accuracy.top1 > 0.95
    assert record.settings["mode"].startswith("tf.function")
    layers = nested_layers(read_spans(store, record.trace_id), {"conv", "pool", "gemm", "reshape"})
    # Names are the Keras layers (the torch module paths); attributes keep the TF op and node.
    assert {"to_nhwc", "4"} <= set(layers["name"])
    ops = set(layers["op_type"])
    assert any("Conv2D" in op for op in ops), ops


def test_compile_runs_the_tensorflow_function_through_xla(store) -> None:
    request = EvaluationRequest(
        model="digits_cnn",
        framework="tensorflow",
        batch_sizes=[4],
        iterations=3,
        warmup=1,
        min_seconds=0,
        inputs=["dataset"],
        compile="default",
    )
    record = EmbeddedClient(store).evaluate(request)
    assert record.settings["mode"] == "tf.function + XLA (jit_compile), Keras inference"
    assert record.accuracy is not None and record.accuracy.top1 > 0.95  # same function
    assert run_options(record) == "fp32, compile: tf.function + XLA (jit_compile), Keras inference"
    framework = request.model_copy(update={"compile": "xla", "trace_level": TraceLevel.FRAMEWORK})
    with pytest.raises(InvalidArgument, match=r"tensorflow's compiled graph has no layers"):
        EmbeddedClient(store).evaluate(framework)
    with pytest.raises(InvalidArgument, match=r"--compile all: tensorflow takes xla \(a bare"):
        EmbeddedClient(store).evaluate(request.model_copy(update={"compile": "all"}))


def _mobilenet_layer_events(
    store: ObjectStore, cache: Path
) -> tuple[tuple[int, ...], bool, list[TimedEvent], set[str]]:
    """(logits shape, all finite, one profiled predict's layer events, the model's layers)."""
    from mlms.predictors.tensorflow_predictor import TensorFlowPredictor

    manifest = get_model("mobilenet_v2")
    asset = AssetManager(store, cache).ensure(manifest, "tensorflow")
    with TensorFlowPredictor(manifest, asset.path, PredictorOptions()) as predictor:
        batch = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
        logits = predictor.predict(batch)
        with predictor.profile_layers() as capture:
            predictor.predict(batch)
        layer_names = {layer.name for layer in predictor.model.layers}
    return logits.shape, bool(np.isfinite(logits).all()), capture.events, layer_names


def test_keras_applications_model_runs_with_layer_events(
    store, mlms_home, tensorflow_process
) -> None:
    """A seeded keras.applications network (MobileNetV2) predicts and profiles by layer."""
    shape, finite, events, layer_names = tensorflow_process.submit(
        _mobilenet_layer_events, store, mlms_home / "cache"
    ).result()
    assert shape == (2, 1000) and finite
    assert {"conv", "relu"} <= {e.kind for e in events}
    named = sum(e.name in layer_names for e in events)
    assert named >= 0.9 * len(events), [e.name for e in events if e.name not in layer_names]
    starts = [e.start_ns for e in events]
    assert starts == sorted(starts) and [e.layer_index for e in events] == list(range(len(events)))


def _gpu_request_error(store: ObjectStore, cache: Path) -> str | None:
    """The error a cuda:0 predictor raises; None where this TensorFlow sees a GPU."""
    from mlms.assets.keras_models import import_tensorflow
    from mlms.predictors.tensorflow_predictor import TensorFlowPredictor

    if import_tensorflow().config.list_physical_devices("GPU"):
        return None
    manifest = get_model("digits_cnn")
    asset = AssetManager(store, cache).ensure(manifest, "tensorflow")
    try:
        TensorFlowPredictor(manifest, asset.path, PredictorOptions(device="cuda:0"))
    except UnsupportedFramework as exc:
        return str(exc)
    return "no error"


def test_gpu_request_without_a_tensorflow_gpu_is_one_clear_error(
    store, mlms_home, tensorflow_process
) -> None:
    message = tensorflow_process.submit(_gpu_request_error, store, mlms_home / "cache").result()
    if message is None:
        pytest.skip("this TensorFlow sees a GPU")
    assert "\n" not in message
    assert re.search(r"device 'cuda:0' asked for.*0 GPU", message), message


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
