"""The evaluation loop on real models on the CPU: record, leveled runs, hierarchy, accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from mlms.errors import HardwareNotFound, InvalidArgument, UnsupportedFramework
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.records import list_records, load_record
from mlms.evaluation.runner import evaluate
from mlms.tracer.archive import read_spans, records_of
from mlms.tracer.levels import TraceLevel

FRAMEWORKS = ["torch", "onnxruntime"]


def _request(**changes) -> EvaluationRequest:
    values = {
        "model": "digits_cnn",
        "batch_sizes": [1, 4],
        "iterations": 6,
        "warmup": 2,
        "min_seconds": 0.0,
        "trace_level": "framework",
    }
    return EvaluationRequest(**(values | changes))


@pytest.fixture(scope="module", params=FRAMEWORKS)
def digits_record(request, store):
    return evaluate(_request(framework=request.param), store=store)


def test_record_has_every_field_and_is_stored(digits_record, store) -> None:
    record = digits_record
    loaded = load_record(store, record.id[:10])
    assert loaded == record
    assert record.id in {r.id for r in list_records(store)}
    assert record.model.name == "digits_cnn" and record.model.version == "1.0.0"
    assert record.framework.version and record.framework.name in FRAMEWORKS
    assert record.hardware.cpu_cores_logical >= 1 and record.hardware.cpu_brand
    assert record.software[record.framework.name] == record.framework.version
    assert record.trace_level == "framework" and len(record.trace_id) == 32
    assert record.settings["intra_op_threads"]
    assert [r.batch_size for r in record.results] == [1, 4]
    for result in record.results:
        stats = result.latency_ms
        assert result.iterations >= 6
        assert 0 < stats.min <= stats.p50 <= stats.p90 <= stats.p95 <= stats.p99 <= stats.max
        assert stats.min <= stats.trimmed_mean <= stats.max
        assert stats.median_ci95[0] <= stats.p50 <= stats.median_ci95[1]
        assert result.throughput == pytest.approx(result.batch_size / (stats.mean / 1e3), rel=1e-6)
        assert set(result.levels) == {"model", "framework"}
        assert result.levels["model"].overhead == 1.0


def test_digits_accuracy_is_real(digits_record) -> None:
    accuracy = digits_record.accuracy
    assert accuracy.samples == 360 and accuracy.dataset == "digits:test"
    assert accuracy.top1 >= 0.9 and accuracy.top5 >= accuracy.top1


def test_layer_spans_nest_in_their_model_span(digits_record, store) -> None:
    spans = records_of(read_spans(store, digits_record.trace_id))
    assert {s.trace_id for s in spans} == {digits_record.trace_id}
    by_id = {s.span_id: s for s in spans}
    layers = [s for s in spans if s.level == TraceLevel.FRAMEWORK]
    assert layers
    for layer in layers:
        parent = by_id[layer.parent_id]
        assert parent.level == TraceLevel.MODEL and parent.run == layer.run
        assert parent.start_ns <= layer.start_ns <= layer.end_ns <= parent.end_ns
        assert layer.kind in {"conv", "relu", "pool", "gemm", "reshape"}
    # Every profiled predict has the whole network: 2 conv + 2 gemm at least.
    per_model: dict[str, list[str]] = {}
    for layer in layers:
        per_model.setdefault(layer.parent_id, []).append(layer.kind)
    for kinds in per_model.values():
        assert kinds.count("conv") == 2 and kinds.count("gemm") == 2


def test_each_level_is_measured_in_its_own_run(digits_record, store) -> None:
    spans = records_of(read_spans(store, digits_record.trace_id))
    models = [s for s in spans if s.level == TraceLevel.MODEL]
    layer_runs = {s.run for s in spans if s.level == TraceLevel.FRAMEWORK}
    for result in digits_record.results:
        model_run = result.levels["model"].run
        framework_run = result.levels["framework"].run
        assert model_run != framework_run and layer_runs >= {framework_run}
        in_model_run = [
            s
            for s in models
            if s.run == model_run and s.attributes["mlms.batch_size"] == result.batch_size
        ]
        assert len(in_model_run) == result.iterations
        # The reported latency is the model-level run's, not the profiled run's.
        durations_ms = np.array([s.duration_ns for s in in_model_run]) / 1e6
        assert result.latency_ms.p50 == pytest.approx(np.median(durations_ms), rel=0.25)
        assert not [s for s in spans if s.level == TraceLevel.FRAMEWORK and s.run == model_run]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_torchvision_model_profiles_its_layers(framework, store) -> None:
    record = evaluate(
        _request(
            model="squeezenet1_1", framework=framework, batch_sizes=[1], iterations=2, warmup=1
        ),
        store=store,
    )
    spans = records_of(read_spans(store, record.trace_id))
    layers = [s for s in spans if s.level == TraceLevel.FRAMEWORK]
    kinds = {s.kind for s in layers}
    # ONNX Runtime fuses each ReLU into its convolution; torch runs them apart.
    assert {"conv", "pool", "concat"} <= kinds
    assert ("relu" in kinds) == (framework == "torch")
    assert any(s.name.startswith("features.") for s in layers)
    assert record.results[0].levels["framework"].spans >= len(layers) // 2
    assert record.accuracy is None


def test_bad_requests_fail_before_running(store) -> None:
    with pytest.raises(HardwareNotFound, match=r"no .h100. device.*cpu"):
        evaluate(_request(hw="h100"), store=store)
    with pytest.raises(InvalidArgument, match="no collector on cpu"):
        evaluate(_request(trace_level="hardware"), store=store)
    with pytest.raises(UnsupportedFramework, match="unknown framework 'caffe'"):
        evaluate(_request(framework="caffe"), store=store)
    with pytest.raises(InvalidArgument, match="has no data set"):
        evaluate(_request(model="squeezenet1_1", inputs=["dataset"]), store=store)
    with pytest.raises(ValueError, match="batch sizes must be positive"):
        _request(batch_sizes=[0])


def test_image_files_go_through_the_models_preprocessing(tmp_path, store) -> None:
    from PIL import Image

    paths = []
    for index in range(3):
        pixels = np.random.default_rng(index).integers(0, 255, (40, 60, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"{index}.png")
        paths.append(str(tmp_path / f"{index}.png"))
    record = evaluate(_request(inputs=paths, trace_level="model", batch_sizes=[2]), store=store)
    assert record.settings["input"] == "files" and record.results[0].iterations >= 6
    with pytest.raises(InvalidArgument, match="cannot read image"):
        evaluate(_request(inputs=[str(tmp_path / "nope.png")]), store=store)
