"""XSP's kernel analyses over a real H100 capture, archived and read back as ``mlms analyze``
does, each checked against an independent computation.

The spans are built from the H100 capture of ``tests/gpu_capture.py`` (three predicts of
resnet18 at batch size 4 with their CUPTI records and the ncu rows of the same batch) through
the tracer, the counter join and the Parquet archive, as a ``full`` run makes them; nothing is
faked. The reference for the SQL layer join is ``mlms.tracer.join.layer_gpu``, the Python join
over span records (containment and correlation ids recomputed, not read from parent links).
"""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pyarrow.compute as pc
import pytest

from mlms.analysis.engine import Spans
from mlms.analysis.kernels import (
    kernel_breakdown,
    kernel_table,
    layer_kernels,
    peaks_of,
    roofline,
)
from mlms.analysis.layers import layer_table, layer_types
from mlms.analysis.names import short_kernel_name
from mlms.store.local import LocalStore
from mlms.tracer.archive import read_table, write_spans
from mlms.tracer.counters import parse_ncu_csv
from mlms.tracer.join import layer_gpu
from mlms.tracer.levels import TraceLevel
from tests import gpu_capture

PREDICTS, LAUNCHES = 3, 114


@pytest.fixture(scope="module")
def capture() -> dict:
    return gpu_capture.load()


@pytest.fixture(scope="module")
def spans(capture, tmp_path_factory):
    """The fixture's predicts as the archived spans of a full run (run 2, after a model run)."""
    rows = parse_ncu_csv(capture["ncu_csv"])
    records = gpu_capture.full_run(capture)
    store = LocalStore(tmp_path_factory.mktemp("store"))
    write_spans(store, "trace", records)
    return Spans(read_table(store, "trace")), rows, records


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
    return Spans(read_table(store, "trace"))


def test_each_layer_gets_its_gpu_and_non_gpu_time(spans, capture):
    frame, _rows, _records = spans
    table = layer_kernels(frame)
    # One row per layer execution slot (a module called twice, like a block's relu, is two).
    slots = {(item["layer_index"], item["name"]) for item in capture["layers"]}
    assert set(zip(table["layer_index"], table["name"], strict=True)) == slots
    assert len(table) == len(slots)
    assert set(table["batch_size"]) == {4}
    assert (table["gpu (us)"] <= table["latency (us)"] + 1e-9).all()
    assert (table["non-gpu (us)"] >= 0).all()
    # Every launch but the two copies around the forward pass belongs to a layer (see
    # test_cupti_join): 114 kernels and memsets per predict between the layers.
    assert table["kernels"].sum() >= LAUNCHES - 2
    # Sorted by non-GPU time, XSP's "where is the device waiting" question.
    assert table["non-gpu (us)"].is_monotonic_decreasing
    # The layer table of the same trace reads the same run and the same latencies.
    layers = layer_table(frame).set_index("layer_index")["latency (ms)"]
    mine = table.set_index("layer_index")["latency (us)"] / 1e3
    assert mine.sort_index().to_numpy() == pytest.approx(layers.sort_index().to_numpy())


def test_layer_types_sum_their_layers_gpu_time(spans):
    """A layer type's GPU time is its layers' median GPU time summed, as layer_kernels has
    each layer's."""
    frame, _rows, _records = spans
    per_layer = layer_kernels(frame).groupby("kind")["gpu (us)"].sum() / 1e3
    kinds = layer_types(frame).set_index("kind")["GPU (ms)"]
    assert kinds.sort_index().to_numpy() == pytest.approx(per_layer.sort_index().to_numpy())
    assert kinds["conv"] > 0 and kinds.sum() > 0


def test_layer_latencies_match_the_python_join(spans):
    """The SQL critical path equals ``layer_gpu`` run on the span records themselves."""
    frame, _rows, records = spans
    layers = [r for r in records if r.level == TraceLevel.FRAMEWORK]
    api = [r for r in records if r.level == TraceLevel.SYSTEM_LIBRARY]
    gpu = [r for r in records if r.level == TraceLevel.HARDWARE and r.kind != "counters"]
    reference = pd.DataFrame(
        [
            {
                "layer_index": layer.layer_index,
                "name": layer.name,
                "latency": joined.latency_ns / 1e3,
                "gpu": joined.gpu_ns / 1e3,
                "kernels": sum(gpu[i].kind == "kernel" for i in joined.kernels),
            }
            for layer, joined in zip(layers, layer_gpu(layers, api, gpu), strict=True)
        ]
    )
    expected = reference.groupby(["layer_index", "name"]).median().sort_index()
    table = layer_kernels(frame).set_index(["layer_index", "name"]).sort_index()
    assert table["latency (us)"].to_numpy() == pytest.approx(expected["latency"].to_numpy())
    assert table["gpu (us)"].to_numpy() == pytest.approx(expected["gpu"].to_numpy())
    assert table["kernels"].to_numpy() == pytest.approx(expected["kernels"].to_numpy())


def test_each_batch_size_is_joined_on_its_own(two_batch_sizes):
    table = layer_kernels(two_batch_sizes)
    assert set(table["batch_size"]) == {4, 8}
    assert (table["non-gpu (us)"] >= 0).all() and (table["latency (us)"] > 0).all()
    columns = ["layer_index", "name", "latency (us)", "gpu (us)", "kernels"]
    four = table[table["batch_size"] == 4][columns].sort_values("layer_index", ignore_index=True)
    eight = table[table["batch_size"] == 8][columns].sort_values("layer_index", ignore_index=True)
    pd.testing.assert_frame_equal(four, eight)


def test_layer_counters_add_up_their_kernels(spans):
    frame, rows, _records = spans
    table = layer_kernels(frame)
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
    assert 0 < conv1["occupancy (%)"] <= 100
    assert set(table["bound"].dropna()) <= {"memory", "compute", "latency"}
    assert {"memory", "compute"} <= set(table["bound"])


def test_kernel_breakdown_per_predict(spans):
    frame, _rows, records = spans
    everything = kernel_breakdown(frame)
    kernels = [r for r in records if r.kind == "kernel"]
    per_predict = sum(k.duration_ns for k in kernels) / 1e3 / PREDICTS
    assert everything["gpu (us)"].sum() == pytest.approx(per_predict, rel=1e-9)
    assert everything["share (%)"].sum() == pytest.approx(100)
    by_name = Counter(k.name for k in kernels)
    assert dict(zip(everything["name"], everything["launches"], strict=True)) == by_name
    top = kernel_breakdown(frame, top=3)
    assert len(top) == 3 and top["gpu (us)"].is_monotonic_decreasing
    assert top["gpu (us)"].iloc[0] == everything["gpu (us)"].max()
    assert all(not name.startswith("_Z") for name in everything["kernel"])
    # Template instances of one kernel are told apart: one short name per full name.
    assert everything["kernel"].is_unique and everything["name"].is_unique


def test_kernel_table_one_row_per_launch(spans):
    frame, _rows, records = spans
    table = kernel_table(frame)
    kernels = sorted((r for r in records if r.kind == "kernel"), key=lambda r: r.start_ns)
    assert len(table) == len(kernels)
    assert table["duration (us)"].to_numpy() == pytest.approx(
        [k.duration_ns / 1e3 for k in kernels]
    )
    counted = table.dropna(subset=["gflop"])
    assert len(counted) >= LAUNCHES * 0.9  # the full run's counted predict
    expected = counted["gflop"] * 1e3 / (counted["dram read (MB)"] + counted["dram write (MB)"])
    assert counted["flop/byte"].to_numpy() == pytest.approx(expected.to_numpy())


def test_rooflines_at_three_levels(spans, capture):
    frame, rows, _records = spans
    peaks = peaks_of(frame)
    assert peaks is not None and peaks.flops_tensor == capture["peaks"]["flops_tensor"]
    model = roofline(frame, "model")
    layer = roofline(frame, "layer")
    kernel = roofline(frame, "kernel")
    assert len(model) == 1
    total = sum(r.figures()["flops"] for r in rows) / 1e9
    # Every predict's kernels carry the counted predict's rows: per predict, the rows' total.
    assert model["gflop"].iloc[0] == pytest.approx(total, rel=1e-6)
    assert layer["gflop"].sum() == pytest.approx(model["gflop"].iloc[0], rel=1e-6)
    assert kernel["gflop"].sum() == pytest.approx(model["gflop"].iloc[0], rel=1e-6)
    assert (model["GFLOP/s"] > 0).all()
    with pytest.raises(ValueError, match="kernel, layer or model"):
        roofline(frame, "thread")


def test_no_kernels_no_rows(spans):
    frame, _rows, _records = spans
    cpu_only = Spans(frame.table.filter(pc.field("level") < int(TraceLevel.SYSTEM_LIBRARY)))
    assert layer_kernels(cpu_only).empty and kernel_breakdown(cpu_only).empty
    assert not layer_table(cpu_only).empty  # the layers are still there


def test_short_kernel_names():
    mangled = (
        "_ZN5cudnn19engines_precompiled16nchwToNhwcKernelIfffLb0ELb1EL21cudnnKernelDataType_t2EE"
        "EvNS0_18nchw2nhwc_params_tIT1_EEPKT_PT0_"
    )
    assert short_kernel_name(mangled) == "cudnn::engines_precompiled::nchwToNhwcKernel"
    assert short_kernel_name("sm80_xmma_fprop_implicit_gemm") == "sm80_xmma_fprop_implicit_gemm"
    assert len(short_kernel_name("k" * 100)) == 60
