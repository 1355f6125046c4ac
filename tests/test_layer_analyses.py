"""XSP's layer-, model- and across-evaluation analyses on real CPU evaluations, each number
checked against an independent computation from the span records themselves (plain Python over
``SpanRecord`` objects: parent links, the profiler's attributes, the record)."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest
import torchvision

from mlms.analysis.across import (
    Side,
    kernel_differences,
    layer_differences,
    prediction_divergence,
)
from mlms.analysis.engine import Spans
from mlms.analysis.layers import (
    layer_executions,
    layer_table,
    layer_types,
    model_costs,
    slowest_layers,
)
from mlms.analysis.model import latency_by_batch, leveled_overheads
from mlms.analysis.timeline import iteration_timeline
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import PREDICTION_SAMPLES, evaluate
from mlms.tracer.archive import read_spans, records_of
from mlms.tracer.levels import TraceLevel

BATCH_SIZES = [1, 2]


def _evaluate(store, framework: str = "torch", **changes):
    values = {
        "model": "resnet18",
        "framework": framework,
        "batch_sizes": BATCH_SIZES,
        "iterations": 4,
        "warmup": 1,
        "min_seconds": 0.0,
        "trace_level": "framework",
    }
    return evaluate(EvaluationRequest(**(values | changes)), store=store)


@pytest.fixture(scope="module")
def resnet18(store):
    return _evaluate(store)


@pytest.fixture(scope="module")
def spans(resnet18, store) -> Spans:
    return Spans.from_store(store, [resnet18.trace_id])


@pytest.fixture(scope="module")
def executions(resnet18, store) -> dict[tuple[int, int, str], list]:
    """(batch size, layer index, name) -> the layer span records of the layer run, by hand."""
    records = records_of(read_spans(store, resnet18.trace_id))
    by_id = {r.span_id: r for r in records}
    layers = [r for r in records if r.level == TraceLevel.FRAMEWORK]
    run = min(r.run for r in layers)
    grouped = defaultdict(list)
    for layer in layers:
        if layer.run == run:
            batch_size = by_id[layer.parent_id].attributes["mlms.batch_size"]
            grouped[(batch_size, layer.layer_index, layer.name)].append(layer)
    return grouped


def test_layer_table_medians_and_spread(spans, executions):
    table = layer_table(spans)
    assert len(table) == len(executions)
    for row in table.to_dict("records"):
        layers = executions[(row["batch_size"], row["layer_index"], row["name"])]
        durations = [layer.duration_ns / 1e6 for layer in layers]
        assert row["executions"] == len(layers) == 4
        assert row["latency (ms)"] == pytest.approx(statistics.median(durations))
        assert row["std (ms)"] == pytest.approx(statistics.stdev(durations))
        assert row["min (ms)"] == pytest.approx(min(durations))
        assert row["max (ms)"] == pytest.approx(max(durations))
        first = layers[0].attributes
        if "flops" in first:
            assert row["GFLOPs"] == pytest.approx(first["flops"] / 1e9)
            assert row["MACs (M)"] == pytest.approx(first["flops"] / 2e6)
        if "output_shapes" in first:
            assert row["output shapes"] == str(first["output_shapes"])
        if "params" in first:
            assert row["params"] == first["params"]
    # Execution order within each batch size.
    for _, mine in table.groupby("batch_size"):
        assert list(mine["layer_index"]) == sorted(mine["layer_index"])


def test_model_costs_match_torchvision(spans):
    costs = model_costs(spans)
    model = torchvision.models.resnet18(weights=None)
    assert list(costs["batch_size"]) == BATCH_SIZES
    assert (costs["params"] == sum(p.numel() for p in model.parameters())).all()
    # torchvision's published figure: 1.814 GMACs per image.
    one = costs.set_index("batch_size")["GMACs"]
    assert one[1] == pytest.approx(1.814, rel=0.03)
    assert one[2] == pytest.approx(2 * one[1], rel=1e-9)


def test_layer_types_add_up_the_layers(spans, executions):
    kinds = layer_types(spans)
    for batch_size in BATCH_SIZES:
        expected: dict[str, list[float]] = defaultdict(list)
        for (size, _index, _name), layers in executions.items():
            if size == batch_size:
                durations = [layer.duration_ns / 1e6 for layer in layers]
                expected[layers[0].kind].append(statistics.median(durations))
        mine = kinds[kinds["batch_size"] == batch_size].set_index("kind")
        assert set(mine.index) == set(expected)
        for kind, medians in expected.items():
            assert mine.loc[kind, "layers"] == len(medians)
            assert mine.loc[kind, "latency (ms)"] == pytest.approx(sum(medians))
        assert mine["share (%)"].sum() == pytest.approx(100)
        assert (mine["GPU (ms)"] == 0).all()  # no GPU: no kernels


def test_slowest_layers_and_executions(spans, executions):
    top = slowest_layers(spans, top=3)
    assert len(top) == 3 * len(BATCH_SIZES)
    for batch_size, mine in top.groupby("batch_size"):
        medians = sorted(
            (
                statistics.median(layer.duration_ns / 1e6 for layer in layers)
                for (size, _i, _n), layers in executions.items()
                if size == batch_size
            ),
            reverse=True,
        )
        assert list(mine["latency (ms)"]) == pytest.approx(medians[:3])
    rows = layer_executions(spans)
    assert len(rows) == sum(len(layers) for layers in executions.values())


def test_timeline_is_the_median_predict(resnet18, spans, store):
    records = records_of(read_spans(store, resnet18.trace_id))
    layer_run = min(r.run for r in records if r.level == TraceLevel.FRAMEWORK)
    models = sorted(
        (
            r
            for r in records
            if r.level == TraceLevel.MODEL
            and r.run == layer_run
            and r.attributes["mlms.batch_size"] == 2
        ),
        key=lambda r: (r.duration_ns, r.span_id),
    )
    median = models[(len(models) - 1) // 2]
    timeline = iteration_timeline(spans, resnet18.trace_id, 2)
    assert timeline.iloc[0]["name"] == "model"
    assert timeline.iloc[0]["duration (us)"] == pytest.approx(median.duration_ns / 1e3)
    children = [r for r in records if r.parent_id == median.span_id]
    assert (timeline["level"] == int(TraceLevel.FRAMEWORK)).sum() == len(children)
    assert (timeline["start (us)"] >= 0).all()
    assert (timeline["end (us)"] <= median.duration_ns / 1e3 + 1e-6).all()


def test_latency_by_batch_and_overheads_are_the_records(resnet18):
    table = latency_by_batch(resnet18)
    assert list(table["batch size"]) == BATCH_SIZES
    for row, result in zip(table.to_dict("records"), resnet18.results, strict=True):
        assert row["p50 (ms)"] == result.latency_ms.p50
        assert row["throughput (inputs/s)"] == result.throughput
    overheads = leveled_overheads([resnet18])
    framework = overheads[overheads["level"] == "framework"]
    expected = [result.levels["framework"].overhead for result in resnet18.results]
    assert list(framework["overhead (x)"]) == expected


def test_two_batch_sizes_side_by_side(resnet18, spans, executions):
    differences = layer_differences(spans, Side(resnet18.trace_id, 1), Side(resnet18.trace_id, 2))
    assert len(differences) == len(executions) // len(BATCH_SIZES)
    assert differences["base layer"].equals(differences["other layer"])  # same network
    row = differences[differences["base layer"] == "conv1"].iloc[0]
    one = statistics.median(layer.duration_ns / 1e6 for layer in executions[(1, 0, "conv1")])
    two = statistics.median(layer.duration_ns / 1e6 for layer in executions[(2, 0, "conv1")])
    assert row["base (ms)"] == pytest.approx(one) and row["other (ms)"] == pytest.approx(two)
    assert row["ratio (x)"] == pytest.approx(two / one)
    ordered = differences["difference (ms)"].abs()
    assert ordered.is_monotonic_decreasing
    # A CPU run has no kernels to compare.
    assert kernel_differences(spans, Side(resnet18.trace_id, 1), Side(resnet18.trace_id, 2)).empty


def test_frameworks_agree_on_predictions(resnet18, store):
    other = _evaluate(store, "onnxruntime", batch_sizes=[2], trace_level="model")
    table = prediction_divergence(resnet18, other)
    assert table["inputs"].iloc[0] == PREDICTION_SAMPLES
    assert table["top-1 agreement (%)"].iloc[0] == 100
    assert table["top-5 overlap (%)"].iloc[0] == 100
    assert table["max top-1 probability difference"].iloc[0] < 1e-3
    # Other inputs do not compare: one clear error naming both.
    reseeded = _evaluate(store, batch_sizes=[1], trace_level="model", seed=7)
    with pytest.raises(InvalidArgument, match="different inputs"):
        prediction_divergence(resnet18, reseeded)


def test_two_traces_in_one_engine(resnet18, store):
    other = _evaluate(store, batch_sizes=[1])
    both = Spans.from_store(store, [resnet18.trace_id, other.trace_id])
    table = layer_table(both)
    assert set(table["trace_id"]) == {resnet18.trace_id, other.trace_id}
    differences = layer_differences(both, Side(resnet18.trace_id, 1), Side(other.trace_id, 1))
    assert differences["base layer"].equals(differences["other layer"])
    assert differences["base (ms)"].notna().all() and differences["other (ms)"].notna().all()
