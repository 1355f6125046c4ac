"""The JAX predictor: Keras 3 models on the JAX backend, compiled by XLA, on the CPU (and on a
GPU where one is, else those tests skip saying why).

Keras picks its backend once per process, and this process must keep its choice free (and
TensorFlow out: ``tests/conftest.py``), so every Keras part runs in a process of its own, as mlms
runs the framework in an agent of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlms.catalog.zoo import get_model
from mlms.errors import InvalidArgument
from mlms.isolation import call_in_own_process
from mlms.predictors.base import PredictorOptions
from mlms.predictors.jax_predictor import JaxPredictor
from mlms.store.base import ObjectStore
from mlms.tracer.archive import read_spans
from mlms.tracer.hlo_join import UNATTRIBUTED
from tests.framework_checks import VOCABULARY, nested_layers


def _gpu_reason() -> str | None:
    """Why the GPU tests cannot run here, or None (checked in a child: JAX starts its GPU
    client in the process that asks)."""
    if subprocess.run(["sh", "-c", "command -v nvidia-smi"], capture_output=True).returncode:
        return "no nvidia-smi"
    found = subprocess.run(
        [sys.executable, "-c", "import jax; print(len(jax.devices('gpu')))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if found.returncode or found.stdout.strip() in ("", "0"):
        return f"JAX sees no GPU: {(found.stderr.strip().splitlines() or ['none'])[-1]}"
    return None


def _small_model_run(folder: Path, device: str) -> dict[str, Any]:
    """A small Keras model (a Conv2D + BatchNormalization + ReLU stem, a nested block, a head),
    saved and run by the predictor: logits beside Keras's own eager call, two profiled
    predicts' layer events, the settings and the compiled module's operand precisions."""
    from mlms.predictors.jax_predictor import import_keras

    keras = import_keras()
    seed = keras.initializers.GlorotUniform(seed=0)
    inputs = keras.Input((1, 8, 8), name="image")
    x = keras.layers.Permute((2, 3, 1), name="to_nhwc")(inputs)
    x = keras.layers.Conv2D(4, 3, kernel_initializer=seed, name="conv1")(x)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU(name="relu1")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    inner = keras.Input((4,), name="block_in")
    hidden = keras.layers.Dense(6, kernel_initializer=seed, name="inner_fc")(inner)
    block = keras.Model(inner, keras.layers.Activation("gelu", name="gelu")(hidden), name="block")
    outputs = keras.layers.Dense(10, kernel_initializer=seed, name="fc")(block(x))
    model = keras.Model(inputs, outputs, name="small")
    model.get_layer("bn1").set_weights([np.full(4, v, np.float32) for v in (1.5, 0.1, 0.2, 2.0)])
    model.save(folder / "model.keras")
    batch = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    with JaxPredictor(
        get_model("digits_cnn"), folder / "model.keras", PredictorOptions(device)
    ) as p:
        logits = p.predict(batch)
        with p.profile_layers() as capture:
            p.predict(batch)
            p.predict(batch)
        hlo = next(iter(p._compiled.values())).as_text()
        settings = p.settings()
    return {
        "logits": logits,
        "expected": np.asarray(model(batch, training=False)),
        "events": capture.events,
        "settings": settings,
        "precisions": re.findall(r"operand_precision=\{(\w+),(\w+)\}", hlo),
    }


@pytest.fixture(scope="module")
def small_cpu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("jax_small")
    return call_in_own_process(_small_model_run, folder, "cpu", what="the JAX predictor")


def test_predictor_computes_the_keras_function_in_strict_fp32(small_cpu) -> None:
    np.testing.assert_allclose(small_cpu["logits"], small_cpu["expected"], rtol=1e-5, atol=1e-5)
    settings = small_cpu["settings"]
    assert settings["matmul_precision"] == "highest" and settings["dtype"] == "float32"
    assert settings["jit_compile_s.2x1x8x8"] > 0  # compiled once, at the first batch
    # Every convolution and product of the compiled module runs at the highest precision.
    assert small_cpu["precisions"] and set(small_cpu["precisions"]) == {("highest", "highest")}


def test_layer_spans_name_keras_layers_and_fused_kernels_serve_several(small_cpu) -> None:
    events = small_cpu["events"]
    first = [e for e in events if e.layer_index is not None]
    assert len(first) == len(events) and len(events) % 2 == 0
    one, two = events[: len(events) // 2], events[len(events) // 2 :]
    assert [e.name for e in one] == [e.name for e in two]  # the same executable each predict
    assert [e.layer_index for e in one] == [e.layer_index for e in two]
    names = {e.name for e in events}
    assert UNATTRIBUTED not in names
    assert "conv1" in names  # (to_nhwc of one channel is a bitcast: no kernel)
    # Nested layers are named by their path; a kernel of several layers is one span of all.
    layers = {layer for e in events for layer in e.attributes["layers"]}
    assert {"bn1", "relu1", "block/inner_fc"} <= layers
    fused = [e for e in events if e.attributes["fused"]]
    assert fused and all(e.name == "+".join(e.attributes["layers"]) for e in fused)
    assert any({"bn1", "relu1"} <= set(e.attributes["layers"]) for e in fused)
    for event in events:
        assert event.kind in VOCABULARY
        assert event.end_ns >= event.start_ns
        assert event.attributes["joined_by"] == "hlo_op"  # the CPU's thunks name their op
        assert event.attributes["kernel_ns"] > 0 and event.attributes["kernels"] >= 1
    assert next(e for e in events if e.name == "conv1").kind == "conv"


def test_precisions_other_than_fp32_are_refused_before_loading() -> None:
    with pytest.raises(InvalidArgument, match=r"--precision fp16: jax on cpu supports fp32"):
        JaxPredictor(get_model("digits_cnn"), Path("unused"), PredictorOptions(precision="fp16"))


def _mlms(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )


def test_compare_torch_and_jax_on_the_tensorflow_agents_keras_asset(store: ObjectStore) -> None:
    """``mlms compare --frameworks torch,jax`` on the CPU: jax runs in an agent of its own over
    the Keras asset of the tensorflow framework (digits' twin, with the torch weights: the same
    predictions), and its layer spans nest in its model spans and analyse like torch's."""
    result = _mlms(
        "compare", "-m", "digits_cnn", "-f", "torch,jax", "-b", "2", "-n", "3",
        "--warmup", "1", "--min-seconds", "0", "-t", "framework", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    torch_record, jax_record = json.loads(result.stdout)
    assert (torch_record["framework"]["name"], jax_record["framework"]["name"]) == ("torch", "jax")
    assert jax_record["framework"]["version"] == metadata.version("jax")
    assert jax_record["settings"]["matmul_precision"] == "highest"
    assert jax_record["settings"]["jit_compile_s.2x1x8x8"] > 0
    assert jax_record["predictions"]["top5"] == torch_record["predictions"]["top5"]
    # The host's part of a predict, carried over gRPC: jax returns once it has dispatched the
    # work to XLA; torch on the CPU returns only once done, so it reports none.
    jax_result, torch_result = jax_record["results"][0], torch_record["results"][0]
    assert 0 < jax_result["launch_ms"]["p50"] <= jax_result["latency_ms"]["p50"]
    assert torch_result["launch_ms"] is None
    assert jax_result["device_ms"] is None  # jax has no way to hold its device while it launches
    tensorflow_asset = store.get_bytes("models/digits_cnn/1.0.0/tensorflow/asset.json")
    assert jax_record["asset_sha256"] == json.loads(tensorflow_asset)["sha256"]
    spans = read_spans(store, jax_record["trace_id"])
    layers = nested_layers(spans, {"conv", "gemm"})
    assert set(layers["name"]) >= {"0"}  # digits' first convolution, by its Keras name
    from mlms.client import EmbeddedClient

    tables = EmbeddedClient(store).analyze([jax_record["id"]], ["layer_table", "layer_types"])
    assert set(tables["layer_table"]["name"]) == set(layers["name"])
    assert "conv" in set(tables["layer_types"]["kind"])


def _gpu_run(folder: Path) -> dict[str, Any]:
    return _small_model_run(folder, "cuda:0")


@pytest.mark.gpu
def test_gpu_kernels_join_to_layers_in_strict_fp32(tmp_path: Path) -> None:
    """On a GPU: XLA's kernels (CUPTI, through JAX's profiler) joined to the layers; each
    predict's kernel time lands on layers, and no kernel runs TF32."""
    reason = _gpu_reason()
    if reason is not None:
        pytest.skip(f"no usable GPU: {reason}")
    run = call_in_own_process(_gpu_run, tmp_path, what="the JAX predictor on the GPU")
    np.testing.assert_allclose(run["logits"], run["expected"], rtol=1e-4, atol=1e-4)
    events = run["events"]
    total = sum(e.attributes["kernel_ns"] for e in events)
    lost = sum(e.attributes["kernel_ns"] for e in events if e.name == UNATTRIBUTED)
    assert total > 0 and lost <= 0.05 * total
    names = [n.lower() for e in events for n in e.attributes["kernel_names"]]
    assert not [n for n in names if "tf32" in n]


def test_gpu_levels_below_the_framework_level_are_refused_for_jax() -> None:
    """XLA's profiler holds CUPTI for the framework level on a GPU, so mlms's own CUPTI and
    cuDNN collectors cannot run beside it: one error, before any asset is built."""
    from mlms.evaluation.option_checks import check_device_options
    from mlms.evaluation.record import EvaluationRequest

    request = EvaluationRequest(model="resnet50", framework="jax", trace_level="hardware")
    with pytest.raises(InvalidArgument, match=r"trace level 'hardware' on jax: .* expected"):
        check_device_options(request, JaxPredictor, "cuda:0")
    check_device_options(request, JaxPredictor, "cpu")  # no GPU level there


def test_gpu_profile_reading_keeps_stream_kernels_per_predict() -> None:
    """JAX's ProfileData of a GPU run, shaped as XLA writes it (no GPU here: the planes are
    built by hand): the predict annotations on the host, kernels on the device's stream lines
    with XLA's hlo_op and hlo_module where its annotation reached them (a cuDNN kernel inside a
    command buffer may lack them), copies and the derived "XLA Ops" line left out."""
    from types import SimpleNamespace as Ns

    from mlms.predictors.jax_predictor import MARK, per_predict, read_profile

    def event(name: str, start: int, end: int, **stats: str) -> Ns:
        return Ns(name=name, start_ns=float(start), duration_ns=float(end - start), stats=stats)

    xla = {"hlo_module": "jit_forward"}
    host = Ns(
        name="/host:CPU",
        lines=[
            Ns(name="python", events=[event(MARK, 100, 1000), event(MARK, 2000, 3000)]),
            Ns(name="tf_XLA", events=[event("fusion.1", 150, 160, hlo_op="fusion.1", **xla)]),
        ],
    )
    stream = [
        event("loop_fusion_1", 200, 300, hlo_op="loop_fusion.1", **xla),
        event("sm90_xmma_fprop_implicit_gemm_f32f32", 300, 500),
        event("MemcpyD2H", 1010, 1020),
        event("loop_fusion_1", 2100, 2200, hlo_op="loop_fusion.1", **xla),
        event("other_module_kernel", 2200, 2300, hlo_op="x", hlo_module="jit_other"),
    ]
    device = Ns(
        name="/device:GPU:0",
        lines=[
            Ns(name="Stream #13(Compute)", events=stream),
            Ns(name="XLA Ops", events=[event("loop_fusion.1", 200, 300, **xla)]),
        ],
    )
    marks, kernels = read_profile(Ns(planes=[device, host]), gpu=True)
    assert marks == [(100, 1000), (2000, 3000)]
    assert [(m, k.name, k.hlo_op) for m, k in kernels] == [
        ("jit_forward", "loop_fusion_1", "loop_fusion.1"),
        (None, "sm90_xmma_fprop_implicit_gemm_f32f32", None),
        ("jit_forward", "loop_fusion_1", "loop_fusion.1"),
        ("jit_other", "other_module_kernel", "x"),
    ]
    windows = per_predict(marks, kernels)
    assert [(start, len(ran)) for start, ran in windows] == [(100, 2), (2000, 2)]
    # On the CPU the host's thunks are the kernels.
    _, thunks = read_profile(Ns(planes=[device, host]), gpu=False)
    assert [k.name for _, k in thunks] == ["fusion.1"]
