"""Benanza's lower bounds on the CPU: the layer graph of real torchvision networks, the bounds
over a hand-built graph whose answer is known, the perfdb reuse, and ``mlms bound`` as a user
runs it. The cuDNN engine search needs a GPU: its test skips here with the reason."""

from __future__ import annotations

import json

import pytest
import torch

from mlms.assets.architectures import architecture
from mlms.bounds.fusion import fusable_chains
from mlms.bounds.graph import Layer, LayerGraph, layer_graph
from mlms.bounds.layer_bench import BenchTask, FusedConv, LayerBench, Timing, run_in_child
from mlms.bounds.lower_bound import Measured, batch_bound
from mlms.bounds.record import BoundRequest
from mlms.bounds.run import bound
from mlms.bounds.sources import GraphSource
from mlms.errors import MlmsError
from mlms.evaluation.record import EvaluationRecord
from mlms.store.local import LocalStore
from tests.shared_assets import copy_asset
from tests.test_cli import _one_line_error, mlms
from tests.test_torch_layer_hooks import Attending


@pytest.fixture(scope="module")
def resnet18_graph() -> LayerGraph:
    return layer_graph(architecture("resnet18").eval(), (2, 3, 224, 224), "resnet18")


def test_graph_has_every_layer_with_its_shapes_and_the_trace_names(resnet18_graph):
    graph = resnet18_graph
    first = graph.layers[0]
    assert (first.name, first.kind, first.op) == ("conv1", "conv", "Conv2d")
    assert first.input_shapes == ((2, 3, 224, 224), (64, 3, 7, 7))
    assert first.output_shape == (2, 64, 112, 112)
    assert dict(first.attributes)["stride"] == [2, 2] and dict(first.attributes)["bias"] is False
    kinds = [layer.kind for layer in graph.layers]
    assert kinds.count("conv") == 20 and kinds.count("add") == 8 and kinds.count("gemm") == 1
    # An operator outside every leaf module is named as the framework-level trace names it.
    assert "layer1.0/add" in {layer.name for layer in graph.layers}
    # The residual add has two producers: the block's last batch norm and the block's input.
    add = next(layer for layer in graph.layers if layer.name == "layer1.0/add")
    producers = {a for a, b in graph.edges if b == add.node}
    assert {graph.layer(p).name for p in producers} == {"layer1.0.bn2", "maxpool"}


def test_equal_layers_share_a_config_and_batch_size_changes_it(resnet18_graph):
    by_name = {layer.name: layer for layer in resnet18_graph.layers}
    assert by_name["layer1.0.conv1"].config == by_name["layer1.1.conv2"].config
    assert by_name["layer1.0.conv1"].config != by_name["layer2.0.conv1"].config
    other = layer_graph(architecture("resnet18").eval(), (4, 3, 224, 224))
    assert other.layers[0].config != resnet18_graph.layers[0].config
    assert len(resnet18_graph.configs()) < len(resnet18_graph.layers)


def test_fusable_chains_are_conv_then_batchnorm_then_activation(resnet18_graph):
    chains = fusable_chains(resnet18_graph)
    assert len(chains) == 20  # every convolution has its own batch norm
    with_relu = [c for c in chains if c.activation is not None]
    # conv1, and the first convolution of each of the eight basic blocks; the others feed an add
    assert len(with_relu) == 9
    assert all(c.fused_activation == "relu" for c in with_relu)


def _layer(node: str, kind: str, op: str) -> Layer:
    return Layer(node, node, kind, op, ((1, 8, 4, 4), (8, 8, 3, 3)), (1, 8, 4, 4), "float32")


def _bench(layer: Layer, *timings: tuple[str, str, float]) -> LayerBench:
    return LayerBench(
        key=layer.config, op=layer.op, kind=layer.kind, input_shapes=[], attributes=[],
        device="test", libraries={},
        timings=[Timing(variant=v, precision=p, median_ms=t, min_ms=t, repeats=3)
                 for v, p, t in timings],
    )  # fmt: skip


def test_attention_is_a_layer_of_the_bound_and_runs_alone_as_in_the_model():
    """A module of several outputs (nn.MultiheadAttention: its output and its weights) is a
    layer of the graph, not left out of the bound; run alone, it reads one tensor as query, key
    and value, as in the model, and so keeps the fused operator it runs there."""
    graph = layer_graph(Attending().eval(), (2, 5, 16))
    attention = graph.layers[0]
    assert (attention.name, attention.kind, attention.op) == (
        "attention", "attention", "MultiheadAttention"
    )  # fmt: skip
    assert attention.output_shape == (2, 5, 16)
    head = next(layer for layer in graph.layers if layer.name == "head")
    assert graph.critical_path({attention.node: 1.0, head.node: 1.0})[0] == 2.0
    with torch.inference_mode(), torch.profiler.profile() as profiled:
        call = graph.isolate(attention, "cpu")
        call.prime()
        call.run()
    assert "aten::_native_multi_head_attention" in {event.name for event in profiled.events()}


class _Transposing(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous() + x.contiguous().transpose(1, 2)


def test_a_layer_reading_a_transposed_view_is_benchmarked_on_one():
    """A layer's configuration has its input's order of axes where that is not contiguous (a
    transpose's view), and run alone it reads a tensor laid out so: the ``contiguous`` that
    copies a transposed view in the model copies there too, where the one of a contiguous
    tensor does nothing, in both places."""
    graph = layer_graph(_Transposing().eval(), (2, 64, 32))
    copying, idle = [layer for layer in graph.layers if layer.op == "contiguous"]
    assert copying.attribute("input_strides") == [[2048, 1, 32]]
    assert idle.attribute("input_strides") is None and copying.config != idle.config

    def copies(layer: Layer) -> bool:
        with torch.inference_mode(), torch.profiler.profile() as profiled:
            graph.isolate(layer, "cpu").run()
        return "aten::copy_" in {event.name for event in profiled.events()}

    assert copies(copying) and not copies(idle)


def test_bounds_and_what_ifs_of_a_hand_built_graph():
    """A branch a -> (b | c) -> d: the critical path is a, c, d."""
    a = Layer("a", "a", "conv", "Conv2d", ((1, 8, 4, 4), (8, 8, 3, 3)), (1, 8, 4, 4), "float32",
              (("pad", 1),))  # fmt: skip
    b = Layer("b", "b", "conv", "Conv2d", ((1, 8, 4, 4), (8, 8, 1, 1)), (1, 8, 4, 4), "float32")
    c = Layer("c", "c", "pool", "MaxPool2d", ((1, 8, 4, 4),), (1, 8, 4, 4), "float32")
    d = Layer("d", "d", "add", "add", ((1, 8, 4, 4), (1, 8, 4, 4)), (1, 8, 4, 4), "float32")
    graph = LayerGraph("toy", 1, [a, b, c, d], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    benches = {
        a.config: _bench(a, ("torch", "fp32", 3.0), ("cudnn:x", "fp32", 2.0),
                         ("torch", "fp16", 1.0)),
        b.config: _bench(b, ("torch", "fp32", 1.0)),
        c.config: _bench(c, ("torch", "fp32", 4.0)),
        d.config: _bench(d, ("torch", "fp32", 0.5)),
    }  # fmt: skip
    measured = Measured("e" * 32, 10.0, {("a", "conv", 0): 3.2}, kernel_ms=8.0, traced_ms=12.5)
    result = batch_bound(graph, benches, measured, {"conv": "fp32", "gemm": "fp32"})
    assert result.sequential_ms == pytest.approx(2.0 + 1.0 + 4.0 + 0.5)
    assert result.parallel_ms == pytest.approx(2.0 + 4.0 + 0.5)
    assert [r.on_critical_path for r in result.layers] == [True, False, True, True]
    assert result.ratio == pytest.approx(0.75)
    first = result.layers[0]
    assert (first.framework_ms, first.bound_ms, first.any_precision_ms) == (3.0, 2.0, 1.0)
    assert first.bound_variant == "cudnn:x (fp32)" and first.measured_ms == 3.2
    what_ifs = {w.name: w for w in result.what_ifs}
    assert what_ifs["best algorithm"].if_ms == pytest.approx(9.0)
    assert what_ifs["tensor cores"].if_ms == pytest.approx(9.0)
    assert what_ifs["parallel layers"].if_ms == pytest.approx(9.0)
    assert what_ifs["no framework overhead"].if_ms == pytest.approx(8.0)
    assert what_ifs["no framework overhead"].detail.endswith("12.500 ms, 1.25x the untraced")
    assert result.traced_ms == 12.5
    assert what_ifs["fusion"].if_ms == pytest.approx(10.0)  # no batch norm or activation


def test_bound_on_the_cpu_matches_every_layer_and_reuses_the_perfdb(store, tmp_path):
    """In a store of its own, with the session's resnet18 asset: another test's bound of a
    network with resnet18's layers would leave nothing to benchmark in the session's."""
    own = LocalStore(tmp_path / "store")
    copy_asset(store, own, "resnet18", "torch")
    request = BoundRequest(
        model="resnet18", batch_sizes=[1], repeats=3, iterations=3, min_seconds=0
    )
    first = bound(request, store=own)
    batch = first.batches[0]
    assert first.benchmarked > 0 and batch.sequential_ms > 0
    assert batch.parallel_ms < batch.sequential_ms  # the residual branches overlap
    # Every layer of the graph that computes found its counterpart in the framework-level
    # trace (a flatten is a view: the CPU profiler path records no layer for it).
    assert all(layer.measured_ms is not None for layer in batch.layers if layer.kind != "reshape")
    assert {w.name for w in batch.what_ifs} == {
        "best algorithm", "fusion", "tensor cores", "parallel layers"
    }  # fmt: skip
    second = bound(request, store=own)
    assert second.benchmarked == 0 and second.cached == first.benchmarked + first.cached
    assert second.batches[0].sequential_ms == pytest.approx(batch.sequential_ms)
    assert own.exists(f"bounds/{second.id}.json")


def test_a_bound_at_bf16_measures_the_model_there_and_benchmarks_its_other_layers(store, tmp_path):
    """A model run at bf16 is measured at bf16, and every layer's bound is at bf16. In a store
    of its own, after a bound of the model at fp32: the convolutions and GEMMs come from the
    perfdb (benchmarked at both precisions then), the other layers are benchmarked again at
    bf16 and keep their fp32 times beside it, so a bound at fp32 after it benchmarks nothing."""
    own = LocalStore(tmp_path / "store")
    copy_asset(store, own, "digits_cnn", "torch")
    ask = {"model": "digits_cnn", "batch_sizes": [1], "precisions": ["fp32", "bf16"],
           "repeats": 3, "iterations": 3, "min_seconds": 0}  # fmt: skip
    first = bound(BoundRequest(**ask), store=own)
    half = bound(BoundRequest(**ask, model_precision="bf16"), store=own)
    assert half.framework_precisions == {"conv": "bf16", "gemm": "bf16", "other": "bf16"}
    evaluation = EvaluationRecord.model_validate_json(
        own.get_bytes(f"evaluations/{half.batches[0].evaluation_id}.json")
    )
    assert evaluation.request.precision == "bf16" and evaluation.settings["precision"] == "bf16"
    layers = [layer for layer in half.batches[0].layers if layer.kind != "reshape"]
    others = {layer.config for layer in layers if layer.kind not in ("conv", "gemm")}
    assert others and half.benchmarked == len(others)
    assert half.cached == first.benchmarked + first.cached - len(others)
    # The framework's own implementation alone, at bf16: timed for every layer.
    assert all(layer.framework_ms is not None for layer in layers)
    assert bound(BoundRequest(**ask), store=own).benchmarked == 0


def test_mlms_bound_prints_the_tables_and_stores_a_record():
    quick = ("--repeats", "3", "-n", "3", "--min-seconds", "0")
    result = mlms("bound", "--model", "digits_cnn", *quick, "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["model"] == "digits_cnn" and record["batches"][0]["sequential_ms"] > 0
    assert record["request"]["min_seconds"] == 0
    printed = mlms("bound", "--model", "digits_cnn", *quick)
    assert printed.returncode == 0, printed.stderr
    for title in ("Lower bounds (LBL)", "What if", "Slowest layers against their bounds"):
        assert title in printed.stdout
    assert "0 benchmarked" in printed.stdout  # the first call left them in the perfdb


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--precision", "fp8"), ("precision", "fp8", "fp32, tf32, fp16, bf16")),
        (("--precision", "tf32"), ("tf32", "not available on cpu")),
        (("--model-precision", "fp8"), ("model_precision", "fp8", "fp32, tf32, fp16, bf16")),
        (("--model-precision", "fp16"), ("fp16", "not available on cpu")),
        (("--batch-size", "0"), ("batch size", "'0'")),
        (("--repeats", "1"), ("repeats",)),
        (("--min-seconds", "-1"), ("min_seconds", "-1.0", "greater than or equal to 0")),
    ],
)
def test_mlms_bound_rejects_bad_input_in_one_line(args, fragments):
    _one_line_error(mlms("bound", "--model", "digits_cnn", *args), *fragments)


def test_a_failing_benchmark_process_is_one_clear_error():
    task = BenchTask(
        source=GraphSource(model="digits_cnn"), input_shape=[1, 1, 8, 8], device="cpu",
        precisions=["fp32"], repeats=3, keys=["x"],
        fused=[FusedConv(conv_node="no_such_node", activation="relu")],
    )  # fmt: skip
    with pytest.raises(MlmsError, match="layer benchmarks of digits_cnn failed: KeyError"):
        list(run_in_child(task))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the cuDNN engine search needs a GPU")
def test_cudnn_engines_are_checked_and_timed_on_a_gpu():
    from mlms.bounds import cudnn_engines

    if not cudnn_engines.available():
        pytest.skip("nvidia-cudnn-frontend is not installed")
    x = torch.rand(8, 64, 28, 28, device="cuda")
    w = torch.rand(64, 64, 3, 3, device="cuda")
    call = cudnn_engines.ConvCall(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    engines = cudnn_engines.conv_engines(torch, call, "tf32")
    assert len(engines) >= 2 and min(e.heuristic_rank for e in engines) == 0
