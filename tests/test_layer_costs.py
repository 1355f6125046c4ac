"""Per-layer costs on FRAMEWORK spans: parameters, flops, output shapes and bytes, memory.

Each network's layer spans must add up to its published cost. The figures are torchvision's
model cards (``torchvision.models.get_model_weights(name).DEFAULT.meta``: ``_ops`` is the
"GFLOPS" column of https://docs.pytorch.org/vision/stable/models.html, which counts
multiply-adds, and ``num_params`` is the sum of ``p.numel()`` over the model's parameters);
``test_published_figures_are_torchvisions`` checks the table against them. Counters that also
count batch norms and activations publish a little more (densenet121: 2.87 G against 2.83 G),
within the 3% allowed here.
"""

from __future__ import annotations

import contextlib
import itertools
import math

import numpy as np
import pandas as pd
import pytest

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.predictors.base import PredictorOptions
from mlms.predictors.onnx_layer_costs import GraphCosts
from mlms.predictors.torch_layer_costs import LayerCosts, leaf_paths
from mlms.predictors.torch_layer_hooks import HookedLayers
from mlms.predictors.torch_predictor import TorchPredictor
from mlms.tracer.archive import read_spans
from mlms.tracer.levels import TraceLevel

#: Model -> (multiply-adds per image in G, parameters): torchvision's published figures.
PUBLISHED = {
    "alexnet": (0.714, 61_100_840),
    "densenet121": (2.834, 7_978_856),
    "mobilenet_v2": (0.301, 3_504_872),
    "resnet18": (1.814, 11_689_512),
    "resnet50": (4.089, 25_557_032),
    "vgg16": (15.47, 138_357_544),
}
MACS_TOLERANCE = 0.03
FLOAT32_BYTES = 4


def _layers(store, model: str, framework: str) -> pd.DataFrame:
    """The FRAMEWORK spans of one profiled predict at batch size 1, evaluated for real."""
    request = EvaluationRequest(
        model=model,
        framework=framework,
        batch_sizes=[1],
        iterations=1,
        warmup=0,
        min_seconds=0.0,
        trace_level="framework",
    )
    record = evaluate(request, store=store)
    spans = read_spans(store, record.trace_id)
    layers = spans[spans.level == int(TraceLevel.FRAMEWORK)]
    first_predict = layers.parent_id.iloc[0]
    return layers[layers.parent_id == first_predict]


def _check_totals(layers: pd.DataFrame, model: str, *, exact_params: bool) -> None:
    macs, params = PUBLISHED[model]
    assert layers.flops.sum() / 2 / 1e9 == pytest.approx(macs, rel=MACS_TOLERANCE)
    if exact_params:  # a layer that runs twice owns its parameters once
        assert layers.drop_duplicates("name").params.sum() == params


def _check_conv_outputs(layers: pd.DataFrame, *, allocations: bool) -> None:
    convs = layers[layers.kind == "conv"]
    assert len(convs) > 0
    for conv in convs.itertuples():
        shape = list(conv.output_shapes[0])
        assert shape[0] == 1 and len(shape) == 4, conv.name
        assert conv.activation_bytes == math.prod(shape) * FLOAT32_BYTES, conv.name
        assert conv.flops > 0 and conv.params > 0, conv.name
        if allocations:
            # Net of what it freed, a convolution keeps exactly its output (a new tensor).
            assert conv.allocated_bytes == conv.activation_bytes, conv.name


def _bytes_of_first(shapes) -> int:
    return math.prod(shapes[0]) * FLOAT32_BYTES


def test_published_figures_are_torchvisions() -> None:
    from torchvision.models import get_model_weights

    for model, (macs, params) in PUBLISHED.items():
        meta = get_model_weights(model).DEFAULT.meta
        assert (meta["_ops"], meta["num_params"]) == (macs, params), model


@pytest.mark.parametrize("model", ["resnet18", "alexnet", "mobilenet_v2"])
def test_torch_layers_add_up_to_the_published_cost(model, store) -> None:
    layers = _layers(store, model, "torch")
    _check_totals(layers, model, exact_params=True)
    _check_conv_outputs(layers, allocations=True)
    # The networks' ReLU and ReLU6 run in place: they allocate nothing, and output their input.
    relus = layers[layers.kind == "relu"]
    assert len(relus) > 0 and (relus.allocated_bytes == 0).all()
    assert (relus.activation_bytes == relus.input_shapes.map(_bytes_of_first)).all()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["vgg16", "densenet121", "resnet50"])
def test_bigger_torch_networks_add_up_to_the_published_cost(model, store) -> None:
    layers = _layers(store, model, "torch")
    _check_totals(layers, model, exact_params=True)
    _check_conv_outputs(layers, allocations=True)


def test_onnxruntime_layers_add_up_to_the_published_cost(store) -> None:
    """Same multiply-adds as torch; parameters differ, since the export folds each batch norm
    into its convolution (11,679,912 = torch's count less the batch norms' 9,600)."""
    layers = _layers(store, "resnet18", "onnxruntime")
    _check_totals(layers, "resnet18", exact_params=False)
    _check_conv_outputs(layers, allocations=False)
    assert layers.params.sum() == PUBLISHED["resnet18"][1] - 9_600


def test_the_hooks_path_gives_the_profiler_paths_costs(store, mlms_home) -> None:
    """The CUDA path (replaced leaf forwards) run on the CPU: same layers, same costs; each
    leaf call's allocation is the change of the device reading across that call in the
    counting pass."""
    import torch

    manifest = get_model("resnet18")
    asset = AssetManager(store, mlms_home / "cache").ensure(manifest, "torch")
    batch = np.zeros((2, 3, 224, 224), dtype=np.float32)
    # A device reading that grows by 1, 2, 3, ...: call n of a leaf (from 0) allocates 2n + 2.
    readings = itertools.accumulate(itertools.count(1))
    with TorchPredictor(manifest, asset.path, PredictorOptions()) as predictor:
        with predictor.profile_layers() as profiled:
            predictor.predict(batch)
        costs = LayerCosts(torch, predictor.module, lambda: next(readings))
        hooks = contextlib.contextmanager(HookedLayers(torch, predictor.module, costs).capture)
        with hooks() as hooked:
            predictor.predict(batch)
        paths = set(leaf_paths(predictor.module))
    keys = ("params", "flops", "output_shapes", "activation_bytes")
    leaves = {e.name: e.attributes for e in profiled.events if e.name in paths}
    assert sum(a.get("flops", 0) for a in leaves.values()) == 2 * 2 * 1_814_073_344
    calls = 0
    for event in hooked.events:
        attributes = event.attributes
        if event.name in paths:
            assert {k: attributes.get(k) for k in keys} == {
                k: leaves[event.name].get(k) for k in keys
            }, event.name
            assert attributes["allocated_bytes"] == 2 * calls + 2, event.name
            calls += 1
        else:  # a residual add or the flatten: no parameters, no flops
            assert attributes["params"] == 0 and "flops" not in attributes, event.name
            assert attributes["output_shapes"] and "allocated_bytes" not in attributes
    assert {e.name for e in hooked.events if e.name in paths} == set(leaves)

    # Operators outside every leaf (the residual adds, the flatten) named as the profiler does.
    def named(events):
        return [(e.name, e.kind, e.attributes["op_type"]) for e in events]

    assert named(hooked.events) == named(profiled.events)


def test_a_layer_that_runs_twice_counts_each_call_once() -> None:
    import torch

    class Twice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.linear(self.linear(x))

    readings = iter([0, 96, 96, 200])
    costs = LayerCosts(torch, Twice().eval(), lambda: next(readings))
    counted = costs.count((torch.Size([3, 8]), torch.float32, torch.device("cpu")))
    assert counted.flops == {"linear": 2 * 3 * 8 * 8}
    assert [counted.allocated_bytes("linear", call) for call in range(3)] == [96, 104, None]
    assert costs.params == {"linear": 8 * 8 + 8}
    # Counted once per batch: a second look runs no forward pass (no readings are left).
    assert costs.count((torch.Size([3, 8]), torch.float32, torch.device("cpu"))) is counted


def test_onnx_costs_follow_a_fused_node_back_to_its_convolution() -> None:
    """ONNX Runtime names a Conv+BatchNormalization+Relu fusion after the Relu's output; the
    parameters are the convolution's and the batch norm's weights (not Clip-style scalars or
    integer shapes), the flops the convolution's."""
    from onnx import TensorProto, helper

    def weight(name: str, *dims: int):
        return helper.make_tensor(name, TensorProto.FLOAT, dims, [0.0] * math.prod(dims))

    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
            helper.make_node("Relu", ["n"], ["r"], name="relu"),
            helper.make_node("Clip", ["r", "lo", "hi"], ["y"], name="clip"),
            helper.make_node("MatMul", ["y", "k"], ["z"], name="matmul"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [
            weight("w", 16, 3, 3, 3),
            *(weight(name, 16) for name in "sbmv"),
            helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]),
            helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0]),
            weight("k", 6, 4),
        ],
    )
    costs = GraphCosts(graph)
    conv_flops = 2 * 16 * 6 * 6 * 27
    fused = costs.costs("r_nchwc", "Conv", [[1, 3, 8, 8], [16, 3, 3, 3]], [[1, 16, 6, 6]])
    assert fused == {"params": 16 * 27 + 4 * 16, "flops": conv_flops}
    # Named after its convolution; the weight ONNX Runtime pre-packed is missing from the
    # profile's inputs, not from the counts.
    named_first = costs.costs("fused conv", "FusedConv", [[1, 3, 8, 8]], [[1, 16, 6, 6]])
    assert named_first == {"params": 16 * 27, "flops": conv_flops}
    assert costs.costs("clip", "Clip", [[1, 16, 6, 6]], [[1, 16, 6, 6]]) == {"params": 0}
    product = costs.costs("matmul", "MatMul", [[1, 16, 6, 6]], [[1, 16, 6, 4]])
    assert product == {"params": 24, "flops": 2 * 16 * 6 * 4 * 6}
    assert costs.costs("ReorderOutput", "ReorderOutput", [[1, 4]], [[1, 4]]) == {"params": 0}
