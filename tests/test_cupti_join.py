"""Joining, hierarchy and counter logic on real records from the H100, run on the CPU.

The fixture is one capture of resnet18 at batch size 4 on an H100 (``tests/gpu_capture.py``
says what it holds). Nothing is faked: the tests replay what the GPU recorded through the same
functions the runner uses.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from mlms.tracer import ml_library
from mlms.tracer.counters import Peaks, match_rows, parse_ncu_csv, roofline
from mlms.tracer.cupti import ClockMap
from mlms.tracer.gpu_run import with_counters
from mlms.tracer.hierarchy import innermost_containers
from mlms.tracer.join import gpu_parents, layer_gpu
from mlms.tracer.levels import TraceLevel
from mlms.tracer.ncu import CounterRun
from tests import gpu_capture

FIXTURE = gpu_capture.FIXTURE


@pytest.fixture(scope="module")
def capture() -> dict:
    return gpu_capture.load()


@pytest.fixture(scope="module")
def events(capture):
    everything = gpu_capture.cupti_events(capture)
    api = [e for e in everything if e.level == TraceLevel.SYSTEM_LIBRARY]
    gpu = [e for e in everything if e.level == TraceLevel.HARDWARE]
    return api, gpu, gpu_capture.layer_events(capture)


def test_fixture_is_small_and_complete(capture):
    assert FIXTURE.stat().st_size < 1 << 20
    kinds = Counter(r["kind"] for r in capture["cupti"]["records"])
    assert kinds["kernel"] == 3 * 114  # three predicts of resnet18's 114 launches
    assert kinds["runtime"] > 0 and kinds["driver"] > 0
    assert kinds["memcpy"] == 6  # one input copy and one logits copy per predict
    assert capture["cupti"]["dropped"] == 0


def test_clock_map_puts_gpu_work_inside_its_predict(capture, events):
    """CUPTI's clock mapped onto time.time_ns: every kernel lies in a model span's interval."""
    _api, gpu, _layers = events
    models = capture["models"]
    for kernel in (g for g in gpu if g.kind == "kernel"):
        assert any(m["start_ns"] <= kernel.start_ns <= kernel.end_ns <= m["end_ns"] for m in models)
    clock = ClockMap(**capture["cupti"]["clock"])
    assert abs(clock.slope - 1) < 1e-4


def test_clock_map_is_linear_between_its_samples():
    clock = ClockMap(cupti_start=1_000, host_start=50_000, cupti_end=3_000, host_end=54_000)
    assert clock.slope == 2
    assert clock.to_host(1_000) == 50_000
    assert clock.to_host(2_000) == 52_000
    assert clock.to_host(3_000) == 54_000


def test_every_gpu_activity_has_the_call_that_launched_it(events):
    api, gpu, _layers = events
    parents = gpu_parents(api, gpu)
    assert all(p is not None for p in parents)
    for activity, parent in zip(gpu, parents, strict=True):
        call = api[parent]
        assert call.correlation_id == activity.correlation_id
        assert call.start_ns <= activity.start_ns  # launched before it ran
        assert any(word in call.name for word in ("Launch", "Memcpy", "Memset"))


def test_api_calls_run_on_the_predict_thread(capture, events):
    """CUPTI's thread id (pthread_self truncated to 32 bits) maps back to threading's."""
    api, _gpu, layers = events
    assert {call.thread for call in api} == {capture["meta"]["predict_thread"]}
    assert {layer.thread for layer in layers} == {capture["meta"]["predict_thread"]}


def test_layers_get_their_kernels_and_fit_them(events):
    api, gpu, layers = events
    joined = layer_gpu(layers, api, gpu)
    kernels = {i for i, g in enumerate(gpu) if g.kind != "memcpy"}
    attached = {k for item in joined for k in item.kernels}
    # Every kernel and memset is launched inside a layer; the two copies per predict happen in
    # predict() around the forward pass, outside every layer.
    assert attached == kernels
    convs = [item for item in joined if item.name.endswith("conv1") or ".conv" in item.name]
    assert convs and all(item.kernels for item in convs)
    for item in joined:
        assert item.gpu_ns <= item.latency_ns
        assert item.non_gpu_ns >= 0
    # Critical-path intervals tile each predict: no layer starts before the one before it ended.
    ordered = sorted(joined, key=lambda item: item.host_start_ns)
    for before, after in itertools.pairwise(ordered):
        assert after.start_ns >= before.end_ns


def test_hierarchy_through_the_tracer(capture, events):
    """Spans through the OpenTelemetry SDK: kernel -> its API call -> its layer -> model."""
    api, gpu, layers = events
    models = gpu_capture.model_events(capture)
    records = gpu_capture.traced_run(1, TraceLevel.HARDWARE, models, layers, api + gpu)
    by_id = {r.span_id: r for r in records}
    kernels = [r for r in records if r.kind == "kernel"]
    assert len(kernels) == 342
    for kernel in kernels:
        call = by_id[kernel.parent_id]
        assert call.level == TraceLevel.SYSTEM_LIBRARY
        assert call.correlation_id == kernel.correlation_id
        layer = by_id[call.parent_id]
        assert layer.level == TraceLevel.FRAMEWORK
        assert layer.start_ns <= call.start_ns and call.end_ns <= layer.end_ns
        assert by_id[layer.parent_id].level == TraceLevel.MODEL


def test_counter_rows_parse_and_join_every_launch(capture, events):
    _api, gpu, _layers = events
    rows = parse_ncu_csv(capture["ncu_csv"])
    assert [r.index for r in rows] == list(range(114))
    kernels = sorted((g for g in gpu if g.kind == "kernel"), key=lambda g: g.correlation_id)
    for predict in range(3):
        launched = kernels[predict * 114 : (predict + 1) * 114]
        matches = match_rows([k.name for k in launched], [r.name for r in rows])
        assert matches == list(range(114))
    figures = [r.figures() for r in rows]
    assert all(f["duration_ns"] > 0 for f in figures)
    assert all(0 < f["achieved_occupancy_pct"] <= 100 for f in figures)
    # Convolutions do arithmetic; the TF32 engines (PyTorch's default for cuDNN) on the tensor
    # cores, the one plain-FP32 engine cuDNN chose here on the FMA pipe.
    convs = [(r.name, f) for r, f in zip(rows, figures, strict=True) if "fprop" in r.name]
    assert len(convs) == 20 and all(f["flops"] > 0 for _, f in convs)
    assert all(f["flops_tensor"] > 0 for name, f in convs if "tf32" in name)
    assert all(f["flops_fp32"] > 0 for name, f in convs if "tf32" not in name)
    # resnet18's first convolution at batch 4: 0.472 G multiply-adds; the implicit GEMM pads
    # K = 3*7*7 = 147 to 160, and ncu's tensor ops count two per multiply-add.
    first = next(f for r, f in zip(rows, figures, strict=True) if "fprop" in r.name)
    assert first["flops_tensor"] == pytest.approx(2 * 4 * 64 * 112 * 112 * 160, rel=1e-3)


def test_roofline_follows_the_measured_ridge(capture):
    peaks = Peaks(**capture["peaks"])
    rows = parse_ncu_csv(capture["ncu_csv"])
    bounds = Counter()
    for row in rows:
        figures = row.figures()
        placed = roofline(figures, peaks)
        bounds[placed["bound"]] += 1
        if placed["arithmetic_intensity"] is not None:
            below = placed["arithmetic_intensity"] < placed["ridge_point"]
            assert placed["bound"] == ("memory" if below else "compute")
    assert bounds["memory"] > 0 and bounds["compute"] > 0


def test_counters_attach_to_each_predicts_kernels(capture, events):
    api, gpu, _layers = events
    rows = parse_ncu_csv(capture["ncu_csv"])
    models = gpu_capture.model_events(capture)
    run = CounterRun(rows=rows, latency_ns=0, wall_seconds=0.0, metrics=[])
    joined = with_counters(api + gpu, models, run, Peaks(**capture["peaks"]))
    kernels = [e for e in joined if e.kind == "kernel"]
    assert all("counter.duration_ns" in k.attributes for k in kernels)
    assert Counter(k.attributes["counter.launch"] for k in kernels) == Counter(
        {i: 3 for i in range(114)}
    )
    assert all(k.attributes["counter.bound"] in ("memory", "compute") for k in kernels)


def test_match_rows_survives_an_extra_launch():
    traced = ["a", "b", "extra", "c", "d"]
    rows = ["a", "b", "c", "d"]
    assert match_rows(traced, rows) == [0, 1, None, 2, 3]
    assert match_rows(["a", "b"], ["a", "x", "b"]) == [0, 2]


def test_cudnn_calls_carry_their_engine_and_sit_in_their_layer(capture):
    part = capture["ml_library"]
    messages = [ml_library.Message(**m) for m in part["messages"]]
    calls = ml_library.to_events(messages, {int(k): v for k, v in part["threads"].items()})
    layers = gpu_capture.timed_events(part["layers"])
    assert Counter(c.name for c in calls) == {
        "cudnnBackendExecute": 20,  # resnet18: 20 convolutions
        "cudnnBatchNormalizationForwardInference": 20,
    }
    parents = innermost_containers(layers, calls)
    for call, parent in zip(calls, parents, strict=True):
        assert parent is not None
        expected = "conv" if call.name == "cudnnBackendExecute" else "batchnorm"
        assert layers[parent].kind == expected
        if expected == "conv":
            assert isinstance(call.attributes["engine_id"], int)
            assert call.attributes["status"] == "CUDNN_STATUS_SUCCESS"
            assert call.start_ns < call.end_ns
    first = calls[0].attributes
    assert first["dims"][:2] == ["[4,3,224,224]", "[64,3,7,7]"]


def test_an_ml_library_run_says_which_libraries_it_could_not_trace():
    collected = ml_library.CudnnCapture()
    assert collected.not_available() == {"cublas": ml_library.CUBLAS_UNAVAILABLE}
    assert "not traced" in ml_library.CUBLAS_UNAVAILABLE
    no_cudnn = ml_library.CudnnCapture(unavailable="the model never loaded cuDNN")
    assert no_cudnn.not_available()["cudnn"] == "the model never loaded cuDNN"
    assert set(no_cudnn.not_available()) == {"cublas", "cudnn"}


def test_cudnn_log_file_parses_entry_and_exit():
    log = (
        "I! CuDNN (v91900 56) function cudnnBackendExecute() called:\n"
        "i!     engine_id: type=int; val=48;\n"
        "i!     dimA: type=int; val=[2,3,224,224];\n"
        "i! Time: 2026-11-22T05:20:43.795190 (0d+0h+0m+0s since start)\n"
        "i! Process=531; Thread=531; GPU=0; Handle=0x1; StreamId=(nil) (defaultStream).\n"
        "\n\n"
        "I! CuDNN (v91900 56) function cudnnBackendExecute() called:\n"
        "i!     status: type=cudnnStatus_t; val=CUDNN_STATUS_SUCCESS (0);\n"
        "i! Time: 2026-11-22T05:20:43.817604 (0d+0h+0m+0s since start)\n"
        "i! Process=531; Thread=531; GPU=NULL; Handle=NULL; StreamId=NULL.\n"
    )
    (call,) = ml_library.to_events(ml_library.parse_log(log), {531: 7})
    assert call.thread == 7
    assert call.end_ns - call.start_ns == 22_414_000
    assert call.attributes["engine_id"] == 48
    assert call.attributes["dims"] == ["[2,3,224,224]"]
