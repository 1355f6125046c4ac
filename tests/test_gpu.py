"""The GPU levels: clear failures on a machine without a GPU, and real-GPU checks.

The first group runs everywhere (CI has no GPU): it checks what a CPU-only machine says when
asked for GPU hardware or a GPU-only trace level. The second group needs an NVIDIA GPU with
cupti-python (``pip install mlms[gpu]``) and skips with the reason otherwise; it ran on the H100
through ``benchmarks/gpu_validation.py``, which exercises the same paths at full size.
"""

from __future__ import annotations

import os
import threading

import pytest

from mlms import hardware
from mlms.errors import HardwareNotFound, InvalidArgument, Unavailable
from mlms.evaluation.runner import leveled_runs
from mlms.tracer import cupti
from mlms.tracer.levels import TraceLevel

GPU_REASON = cupti.available()
needs_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=f"no usable GPU: {GPU_REASON}")


def _cpu_only() -> hardware.HardwareInfo:
    """This machine as detected, with its GPU list emptied: what a CPU-only host reports."""
    return hardware.detect().model_copy(update={"gpus": []})


def test_gpu_hw_on_a_cpu_only_machine_names_what_exists():
    with pytest.raises(HardwareNotFound, match=r"no 'h100' device on this machine .* no GPU"):
        hardware.resolve("h100", _cpu_only())
    with pytest.raises(HardwareNotFound, match="no 'gpu' device"):
        hardware.resolve("gpu", _cpu_only())


@pytest.mark.parametrize("level", ["ml_library", "system_library", "hardware"])
def test_gpu_only_trace_levels_on_cpu_say_they_need_a_gpu(level):
    with pytest.raises(InvalidArgument, match=rf"'{level}' has no collector on cpu.*--hw"):
        leveled_runs(TraceLevel.parse(level), "cpu")


def test_leveled_runs_on_a_gpu():
    assert leveled_runs(TraceLevel.FULL, "cuda:0") == [
        TraceLevel.MODEL,
        TraceLevel.FRAMEWORK,
        TraceLevel.ML_LIBRARY,
        TraceLevel.SYSTEM_LIBRARY,
        TraceLevel.HARDWARE,
        TraceLevel.FULL,
    ]
    assert leveled_runs(TraceLevel.SYSTEM_LIBRARY, "cuda:0")[-1] == TraceLevel.SYSTEM_LIBRARY
    # On the CPU, full means every level the CPU has.
    assert leveled_runs(TraceLevel.FULL, "cpu") == [TraceLevel.MODEL, TraceLevel.FRAMEWORK]
    # A compiled graph without layers: the GPU levels trace its kernels, no framework run.
    assert leveled_runs(TraceLevel.HARDWARE, "cuda:0", layers=False) == [
        TraceLevel.MODEL,
        TraceLevel.ML_LIBRARY,
        TraceLevel.SYSTEM_LIBRARY,
        TraceLevel.HARDWARE,
    ]


@pytest.mark.skipif(GPU_REASON is None, reason="this machine has a usable GPU")
def test_cupti_collector_without_a_gpu_says_why():
    with pytest.raises(Unavailable, match="trace level 'hardware' needs CUPTI: "):
        cupti.CuptiCollector(TraceLevel.HARDWARE)


def test_cupti_collector_names_an_unknown_api_domain():
    with pytest.raises(ValueError, match="API domains 'NVTX': expected among RUNTIME, DRIVER"):
        cupti.CuptiCollector(TraceLevel.HARDWARE, api=("RUNTIME", "NVTX"))


def test_cupti_collector_refuses_a_buffer_too_small_to_hold_a_step():
    with pytest.raises(ValueError, match="CUPTI buffer of 4096 bytes: expected 1 MiB or more"):
        cupti.CuptiCollector(TraceLevel.HARDWARE, buffer_bytes=4096)


def test_counters_without_ncu_say_so(monkeypatch):
    from mlms.tracer import ncu

    monkeypatch.setenv("PATH", os.devnull)
    with pytest.raises(Unavailable, match="need Nsight Compute's ncu on PATH"):
        ncu.ncu_executable()


@needs_gpu
def test_cupti_records_a_kernel_and_its_launch():
    import torch

    from mlms.tracer.join import gpu_parents

    a = torch.randn(512, 512, device="cuda")
    torch.cuda.synchronize()
    with cupti.CuptiCollector(sync=torch.cuda.synchronize) as capture:
        (a @ a).sum()
    events = capture.events()
    kernels = [e for e in events if e.kind == "kernel"]
    api = [e for e in events if e.level == TraceLevel.SYSTEM_LIBRARY]
    assert kernels and capture.dropped == 0
    assert all(p is not None for p in gpu_parents(api, kernels))
    assert {e.thread for e in api} == {threading.get_ident()}


@needs_gpu
def test_another_cupti_client_is_reported_not_crashed_into():
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]), pytest.raises(Unavailable, match="in use"):
        with cupti.CuptiCollector(sync=torch.cuda.synchronize):
            torch.ones(8, device="cuda").sum()
    # Once it has stopped, ours works again.
    with cupti.CuptiCollector(sync=torch.cuda.synchronize) as capture:
        torch.ones(8, device="cuda").sum()
    assert any(r["kind"] == "kernel" for r in capture.records)


@needs_gpu
def test_cudnn_calls_carry_the_engine_cudnn_chose():
    import torch

    from mlms.tracer.ml_library import collect_cudnn

    conv = torch.nn.Conv2d(3, 8, 3).cuda()
    x = torch.randn(2, 3, 32, 32, device="cuda")
    conv(x)
    with collect_cudnn() as capture:
        conv(x)
        torch.cuda.synchronize()
    calls = [c for c in capture.events() if c.name == "cudnnBackendExecute"]
    assert calls and isinstance(calls[0].attributes["engine_id"], int)


def _resnet18_at_the_hardware_level(store, **changes):
    """(record, its spans, spans by id, the hardware run's kernels) of resnet18 on the GPU."""
    from mlms.evaluation.record import EvaluationRequest
    from mlms.evaluation.runner import evaluate
    from mlms.tracer.archive import read_spans, records_of

    values = dict(model="resnet18", hw="gpu", trace_level="hardware", iterations=3,
                  min_seconds=0, warmup=2)  # fmt: skip
    record = evaluate(EvaluationRequest(**values | changes), store=store)
    spans = records_of(read_spans(store, record.trace_id))
    hardware = record.results[0].levels["hardware"].run
    kernels = [s for s in spans if s.kind == "kernel" and s.run == hardware]
    return record, spans, {s.span_id: s for s in spans}, kernels


@needs_gpu
def test_hardware_level_evaluation_joins_kernels_to_layers(store):
    record, spans, by_id, kernels = _resnet18_at_the_hardware_level(store)
    levels = record.results[0].levels
    assert list(levels) == ["model", "framework", "ml_library", "system_library", "hardware"]
    assert all(level.dropped == 0 for level in levels.values())
    assert kernels
    under_layers = [
        k for k in kernels if by_id[by_id[k.parent_id].parent_id].level == TraceLevel.FRAMEWORK
    ]
    assert len(under_layers) / len(kernels) > 0.9
    # The ML_LIBRARY run has cuDNN's calls and says that cuBLAS's are not traced.
    mllib = [s for s in spans if s.run == levels["ml_library"].run]
    assert any(s.name == "cudnnBackendExecute" for s in mllib)
    [cublas] = [s for s in mllib if s.name == "cublas: not available"]
    assert cublas.level == TraceLevel.ML_LIBRARY


@needs_gpu
def test_a_compiled_model_traces_its_kernels_under_the_model(store):
    record, spans, by_id, kernels = _resnet18_at_the_hardware_level(store, compile="default")
    levels = record.results[0].levels
    assert list(levels) == ["model", "ml_library", "system_library", "hardware"]
    assert kernels
    # Inductor's kernels, each under its launch, under the predict that ran it.
    assert any(k.name.startswith("triton_") for k in kernels)
    assert all(by_id[by_id[k.parent_id].parent_id].level == TraceLevel.MODEL for k in kernels)
    assert not [s for s in spans if s.level == TraceLevel.FRAMEWORK]


@needs_gpu
def test_peaks_are_measured_once_and_cached():
    from mlms.tracer import peaks

    first = peaks.peaks("cuda:0")
    import torch

    assert peaks.cache_path(torch.cuda.get_device_name(0)).exists()
    assert peaks.peaks("cuda:0") == first
    assert first.flops_tensor > first.flops_fp32 > 0 and first.dram_bytes_per_s > 0


def test_cudnn_log_is_routed_in_process_without_a_gpu():
    """cuDNN's API log through cudnnSetCallback: works wherever torch's cuDNN is loaded."""
    import time

    import torch  # noqa: F401 - loads cuDNN with the CUDA build of torch

    from mlms.tracer.ml_library import collect_cudnn, cudnn_library

    library = cudnn_library()
    if library is None:
        pytest.skip("this torch build loads no cuDNN")
    before = time.time_ns()
    with collect_cudnn() as capture:
        version = library.cudnnGetVersion()
    calls = [m for m in capture.messages if m.function == "cudnnGetVersion"]
    assert version > 0 and calls
    assert calls[0].thread == threading.get_native_id()
    # The callback's timestamp is the wall clock to the microsecond, so host-clock spans line up.
    assert before - 1_000_000 <= calls[0].time_ns <= time.time_ns()


@pytest.mark.gpu_alone
@pytest.mark.skipif(not hardware.detect().gpus, reason="no NVIDIA GPU (NVML lists none)")
def test_a_gpu_predict_times_its_launch_and_the_devices_work_alone(store):
    """A GPU predict times its launch (the host's part) and the device's work alone (its
    launches queued behind a spinning kernel), each under the predict, which also copies
    the batch in and the logits out. resnet18 eager at batch 1 leans on the host: its launch
    is a far larger part of the predict than at batch 64, where the device decides (on two
    H200 hosts 0.91 and 0.77 of the predict at batch 1, 0.38 at 64). With CUDA graphs the
    launch is a small part. Alone on the GPU: another process's kernels share the device in
    time slices, which the predict's wait would count (0.32 at batch 1 beside three other
    test processes)."""
    from mlms.evaluation.record import EvaluationRequest
    from mlms.evaluation.runner import evaluate

    def run(batches: list[int], compile: str | None = None):
        request = EvaluationRequest(
            model="resnet18", hw="gpu", batch_sizes=batches, iterations=20, min_seconds=0.5,
            warmup=5, compile=compile,
        )  # fmt: skip
        return evaluate(request, store=store).results

    one, many = run([1, 64])
    (graphs,) = run([1], "reduce-overhead")
    seen = {
        name: (r.latency_ms.p50, r.launch_ms, r.device_ms)
        for name, r in (("eager bs 1", one), ("eager bs 64", many), ("graphs bs 1", graphs))
    }
    for result in (one, many, graphs):
        assert result.launch_share is not None and 0 < result.launch_share < 1, seen
        assert result.device_ms is not None, seen
        assert 0 < result.device_ms["p50"] < result.latency_ms.p50, seen
    assert one.launch_share > 1.5 * many.launch_share, seen
    assert many.launch_bound is False, seen
    assert graphs.launch_share < 0.5, seen


@pytest.mark.skipif(not hardware.detect().gpus, reason="no NVIDIA GPU (NVML lists none)")
def test_energy_of_a_gpu_evaluation_comes_from_nvmls_counter(store):
    """NVML's real counters around a real GPU evaluation (without cupti: NVML only)."""
    from mlms.evaluation.record import EvaluationRequest
    from mlms.evaluation.runner import evaluate

    record = evaluate(
        EvaluationRequest(
            model="resnet18",
            hw="gpu",
            batch_sizes=[1, 32],
            iterations=20,
            min_seconds=1.0,
            warmup=5,
            input_on_device=True,
        ),
        store=store,
    )
    for result in record.results:
        energy = result.energy
        assert energy is not None and energy.reason is None and energy.source == "nvml"
        inferences = result.batch_size * result.iterations
        assert energy.joules_per_inference == pytest.approx(energy.joules / inferences)
        assert energy.seconds == pytest.approx(result.seconds, rel=0.05)
        assert 0 < energy.idle_watts < 1500 and 0 < energy.average_watts < 1500
        assert energy.power_samples >= 10  # 20 Hz over at least a second, in the child
        assert energy.peak_watts is not None and energy.peak_watts > 0
        # the driver's counter changes every few to 100 ms, which the joules' ± reflects
        assert 0 < energy.counter_period_s < 0.5
        assert energy.joules_uncertainty == pytest.approx(
            2 * energy.counter_period_s / energy.seconds
        )
    small, large = record.results
    assert large.energy.joules_per_inference < small.energy.joules_per_inference


@pytest.mark.skipif(not hardware.detect().gpus, reason="no NVIDIA GPU (NVML lists none)")
def test_the_devices_work_alone_is_timed_on_a_batch_a_predict_staged_before(store):
    """``device_times`` called on its own, after a predict staged the same shape's batch into
    its pinned buffer under inference mode, copies into that buffer outside that mode: the
    buffer is a plain tensor (torch refuses an in-place copy into an inference tensor outside
    inference mode)."""
    import numpy as np

    from mlms.assets.manager import AssetManager
    from mlms.catalog.zoo import get_model
    from mlms.config import mlms_home
    from mlms.predictors.base import PredictorOptions
    from mlms.predictors.registry import predictor_class

    manifest = get_model("resnet18")
    asset = AssetManager(store, mlms_home() / "cache").ensure(manifest, "torch")
    batch = np.zeros((1, *manifest.inputs[0].shape), manifest.inputs[0].dtype)
    options = PredictorOptions(device="cuda:0")
    with predictor_class("torch")(manifest, asset.path, options) as predictor:
        predictor.predict(batch)
        times = predictor.device_times(batch, 2, max(predictor.launches))
    assert len(times) == 2 and all(t > 0 for t in times), times
