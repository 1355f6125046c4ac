"""Collectives are a kind of their own, and every span can say which rank recorded it
(docs/DESIGN.md, "Span record"): the classifier on the names torch and NCCL really write, the
writer's ``rank`` column, old archives read back with none, and NCCL kernels in the kernel
tables under their own kind. The names are those torch 2.14's profiler wrote for two gloo
processes on this machine and those of NCCL kernels in real GPU traces (HTA's test data, the
H200 run of the issue); no GPU runs here."""

from __future__ import annotations

import json

import pytest

from mlms.analysis.engine import Spans
from mlms.analysis.kernels import kernel_breakdown
from mlms.tracer.archive import SCHEMA, records_of, to_table, upgrade
from mlms.tracer.communication import COMMUNICATION, collective_of, is_communication
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import SpanRecord

COLLECTIVES = {
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": "all_reduce",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": "all_reduce",
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": "broadcast",
    "ncclDevKernel_AllGather_RING_LL": "all_gather",
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL": "reduce_scatter",
    "ncclDevKernel_SendRecv": "send_recv",
    # As CUPTI names it (NCCL 2.28, an H200): mangled.
    "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE": "all_reduce",
    "c10d::allreduce_": "all_reduce",
    "c10d::allgather_": "all_gather",
    "c10d::_reduce_scatter_base_": "reduce_scatter",
    "c10d::broadcast_": "broadcast",
    "c10d::barrier": "barrier",
    "_c10d_functional::all_reduce": "all_reduce",
    "gloo:all_reduce": "all_reduce",
    "gloo:all_gather": "all_gather",
    "nccl:all_reduce": "all_reduce",
    "record_param_comms": None,
}
NOT_COLLECTIVES = ["aten::add", "aten::linear", "aten::all", "Memcpy DtoH (Device -> Pinned)"]
NOT_COLLECTIVES += ["void at::native::reduce_kernel<512, 1>", "cudaLaunchKernel"]
NOT_COLLECTIVES += ["_ZN2at6native18elementwise_kernelILi128ELi4EEEviT1_"]


@pytest.mark.parametrize(("name", "collective"), COLLECTIVES.items())
def test_collectives_are_communication_at_every_level(name: str, collective: str | None) -> None:
    assert is_communication(name)
    assert collective_of(name) == collective
    assert normalise_kind(name) == COMMUNICATION  # a framework's op of that name, too


@pytest.mark.parametrize("name", NOT_COLLECTIVES)
def test_other_names_are_not(name: str) -> None:
    assert not is_communication(name)


def _span(span_id: str, level: TraceLevel, name: str, kind: str, start: int, end: int, **kw):
    return SpanRecord("t", span_id, kw.pop("parent", None), level, 1, name, kind, start, end, **kw)


def test_the_writer_moves_the_rank_into_its_column_and_back() -> None:
    records = [
        _span("a", TraceLevel.MODEL, "predict", "model", 0, 10, attributes={"mlms.rank": 1}),
        _span("b", TraceLevel.MODEL, "predict", "model", 0, 10),
    ]
    table = to_table(records)
    assert table["rank"].to_pylist() == [1, None]
    assert json.loads(table["attributes"][0].as_py()) == {}  # moved, not copied
    assert records_of(table.to_pandas())[0].attributes["mlms.rank"] == 1


def test_an_archive_written_before_ranks_reads_back_with_none() -> None:
    """An archive of the schema before the rank and collective columns: upgrade adds them
    null, and the analyses still run on it."""
    old_names = [n for n in SCHEMA.names if n not in ("rank", "collective_bytes", "group_size")]
    records = [
        _span("m", TraceLevel.MODEL, "predict", "model", 0, 100, attributes={"mlms.batch_size": 2}),
        _span("k", TraceLevel.HARDWARE, "gemm", "kernel", 10, 60, parent="m", device="cuda:0"),
    ]
    old = to_table(records).select(old_names)
    table = upgrade(old)
    assert table.schema.names == SCHEMA.names
    assert table["rank"].null_count == table.num_rows == 2
    assert kernel_breakdown(Spans(old))["launches"].tolist() == [1]


def test_nccl_kernels_show_in_the_kernel_tables_as_communication() -> None:
    records = [
        _span("m", TraceLevel.MODEL, "predict", "model", 0, 100, attributes={"mlms.batch_size": 1}),
        _span("k", TraceLevel.HARDWARE, "gemm", "kernel", 10, 40, parent="m", device="cuda:0"),
        _span(
            "n",
            TraceLevel.HARDWARE,
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
            COMMUNICATION,
            40,
            90,
            parent="m",
            device="cuda:0",
        ),
    ]
    table = kernel_breakdown(Spans(to_table(records)))
    kinds = dict(zip(table["name"], table["kind"], strict=True))
    assert kinds == {"gemm": "kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": COMMUNICATION}
    shares = dict(zip(table["name"], table["share (%)"], strict=True))
    assert shares["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"] == pytest.approx(100 * 50 / 80)


def test_torch_layer_capture_emits_a_collective_inside_an_op_as_communication() -> None:
    """torch.profiler over a real gloo all-reduce (one process, world size 1) inside an op:
    the CPU layer capture's collectives walk finds it below the op, kind communication."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from mlms.predictors.torch_predictor import _collectives

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        hidden = torch.ones(8, 8)
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            with record_function("residual add"):
                hidden = hidden * 2
                dist.all_reduce(hidden)
                hidden = hidden + 1
    finally:
        dist.destroy_process_group()
    around = next(e for e in profiler.events() if e.name == "residual add")
    found = list(_collectives(around, offset_ns=1000, thread=7))
    assert [(e.name, e.kind, e.level, e.thread) for e in found] == [
        ("c10d::allreduce_", COMMUNICATION, TraceLevel.FRAMEWORK, 7)
    ]
    start, end = (int(t * 1000) + 1000 for t in (around.time_range.start, around.time_range.end))
    assert start <= found[0].start_ns < found[0].end_ns <= end
