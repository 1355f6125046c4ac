"""XSP's GPU tables over a real H100 capture, archived and read back as ``mlms analyze`` does.

The spans are built from the H100 capture of ``tests/gpu_capture.py`` (three predicts of
resnet18 at batch size 4 with their CUPTI records and the ncu rows of the same batch) through
the tracer, the counter join and the Parquet archive, as a ``full`` run makes them; nothing is
faked.
"""

from __future__ import annotations

import pandas as pd
import pytest

from mlms.analysis.gpu_tables import gpu_layers, short_kernel_name, top_kernels
from mlms.analysis.tables import layer_spans
from mlms.store.local import LocalStore
from mlms.tracer.archive import read_spans, write_spans
from mlms.tracer.counters import Peaks, parse_ncu_csv
from mlms.tracer.gpu_run import with_counters
from mlms.tracer.levels import TraceLevel
from mlms.tracer.ncu import CounterRun
from tests import gpu_capture

PREDICTS, LAUNCHES = 3, 114


@pytest.fixture(scope="module")
def capture() -> dict:
    return gpu_capture.load()


@pytest.fixture(scope="module")
def spans(capture, tmp_path_factory):
    """The fixture's predicts as the archived spans of a full run (run 2, after a model run)."""
    models = gpu_capture.model_events(capture, {"mlms.batch_size": capture["meta"]["batch_size"]})
    rows = parse_ncu_csv(capture["ncu_csv"])
    counters = CounterRun(rows=rows, latency_ns=0, wall_seconds=0.0, metrics=[])
    cupti = with_counters(
        gpu_capture.cupti_events(capture), models, counters, Peaks(**capture["peaks"])
    )
    layers = gpu_capture.layer_events(capture)
    records = gpu_capture.traced_run(2, TraceLevel.FULL, models, layers, cupti)
    store = LocalStore(tmp_path_factory.mktemp("store"))
    write_spans(store, "trace", records)
    return read_spans(store, "trace"), rows


@pytest.fixture(scope="module")
def two_batch_sizes(capture, tmp_path_factory):
    """The capture as batch size 4 and, one second later, again as "batch size 8".

    As in a real evaluation, each batch size is its own CUPTI collection, and the two share
    correlation ids: a join across batch sizes would hang one's kernels under the other's calls.
    """
    cupti, layers = gpu_capture.cupti_events(capture), gpu_capture.layer_events(capture)
    first = gpu_capture.model_events(capture, {"mlms.batch_size": 4})
    second = gpu_capture.model_events(capture, {"mlms.batch_size": 8})
    later = 1_000_000_000
    records = gpu_capture.traced_run(
        2, TraceLevel.HARDWARE, first, layers, cupti,
        tuple(gpu_capture.shifted(e, later) for e in (second, layers, cupti)),
    )  # fmt: skip
    store = LocalStore(tmp_path_factory.mktemp("store"))
    write_spans(store, "trace", records)
    return read_spans(store, "trace")


def test_each_layer_gets_its_gpu_and_non_gpu_time(spans, capture):
    frame, _rows = spans
    table = gpu_layers(frame)
    # One row per layer execution slot (a module called twice, like a block's relu, is two).
    slots = {(item["layer_index"], item["name"]) for item in capture["layers"]}
    assert set(zip(table["layer_index"], table["name"], strict=True)) == slots
    assert len(table) == len(slots)
    layer_names = {name for _index, name in slots}
    assert set(table["batch_size"]) == {4}
    assert (table["gpu (us)"] <= table["latency (us)"]).all()
    assert (table["non-gpu (us)"] >= 0).all()
    # Every launch but the two copies around the forward pass belongs to a layer (see
    # test_cupti_join): 114 kernels and memsets per predict between the layers.
    assert table["kernels"].sum() >= LAUNCHES
    # Sorted by non-GPU time, XSP's "where is the device waiting" question.
    assert table["non-gpu (us)"].is_monotonic_decreasing
    # The same layers and batch size as the layer tables see.
    assert set(layer_spans(frame)["name"]) == layer_names


def test_each_batch_size_is_joined_on_its_own(two_batch_sizes):
    table = gpu_layers(two_batch_sizes)
    assert set(table["batch_size"]) == {4, 8}
    assert (table["non-gpu (us)"] >= 0).all() and (table["latency (us)"] > 0).all()
    columns = ["layer_index", "name", "latency (us)", "gpu (us)", "kernels"]
    four = table[table["batch_size"] == 4][columns].sort_values("layer_index", ignore_index=True)
    eight = table[table["batch_size"] == 8][columns].sort_values("layer_index", ignore_index=True)
    pd.testing.assert_frame_equal(four, eight)


def test_layer_counters_add_up_their_kernels(spans):
    frame, rows = spans
    table = gpu_layers(frame)
    # Each predict runs every counted launch once: the layers' flops add up to ncu's rows,
    # the kernels outside any layer (none in resnet18) aside.
    total = sum(r.figures()["flops"] for r in rows) / 1e9
    assert table["gflop"].sum() == pytest.approx(total, rel=1e-6)
    conv1 = table[table["name"] == "conv1"].iloc[0]
    # resnet18's first convolution at batch 4 on the tensor cores: 2 x 4x64x112x112 outputs x
    # K padded to 160 (test_cupti_join), plus whatever its layout kernels add.
    assert conv1["gflop"] >= 2 * 4 * 64 * 112 * 112 * 160 / 1e9 * 0.999
    assert conv1["dram (MB)"] > 0
    assert conv1["flop/byte"] == pytest.approx(conv1["gflop"] * 1e3 / conv1["dram (MB)"])
    assert set(table["bound"].dropna()) <= {"memory", "compute", "latency"}
    assert {"memory", "compute"} <= set(table["bound"])


def test_top_kernels_per_predict(spans):
    frame, _rows = spans
    everything = top_kernels(frame, top=1000)
    kernels = frame[frame["kind"] == "kernel"]
    per_predict = (kernels["end_ns"] - kernels["start_ns"]).sum() / 1e3 / PREDICTS
    assert everything["gpu (us)"].sum() == pytest.approx(per_predict, rel=1e-9)
    assert everything["calls"].sum() == pytest.approx(LAUNCHES)
    assert everything["share (%)"].sum() == pytest.approx(100)
    top = top_kernels(frame, top=3)
    assert len(top) == 3 and top["gpu (us)"].is_monotonic_decreasing
    assert top["gpu (us)"].iloc[0] == everything["gpu (us)"].max()
    assert all(not name.startswith("_Z") for name in everything["kernel"])


def test_no_kernels_no_rows(spans):
    frame, _rows = spans
    no_gpu = frame[frame["level"] < int(TraceLevel.SYSTEM_LIBRARY)]
    assert gpu_layers(no_gpu).empty and top_kernels(no_gpu).empty


def test_short_kernel_names():
    mangled = (
        "_ZN5cudnn19engines_precompiled16nchwToNhwcKernelIfffLb0ELb1EL21cudnnKernelDataType_t2EE"
        "EvNS0_18nchw2nhwc_params_tIT1_EEPKT_PT0_"
    )
    assert short_kernel_name(mangled) == "cudnn::engines_precompiled::nchwToNhwcKernel"
    assert short_kernel_name("sm80_xmma_fprop_implicit_gemm") == "sm80_xmma_fprop_implicit_gemm"
    assert len(short_kernel_name("k" * 100)) == 60
