"""Hardware counters per kernel: parse Nsight Compute rows, derive figures, join, classify.

Counters come from their own run under ``ncu`` (see ``mlms.tracer.ncu`` for why ncu and not
CUPTI's range profiler). This module is pure: it parses ncu's raw CSV page, turns the metrics
into flops, DRAM bytes and occupancy, matches counter rows to the kernels of a traced predict by
launch order and kernel name, and places each kernel on the roofline of the measured peaks.
"""

from __future__ import annotations

import csv
import difflib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mlms.errors import InvalidArgument

#: Metric -> (figure it feeds, weight). FMAs count two flops. Only metrics the device's ncu
#: lists are requested (``wanted_metrics``), so a missing one drops a figure, not the run.
FLOP_METRICS: dict[str, tuple[str, int]] = {
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": ("flops_fp32", 2),
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": ("flops_fp32", 1),
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum": ("flops_fp32", 1),
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum": ("flops_fp16", 2),
    "sm__sass_thread_inst_executed_op_hadd_pred_on.sum": ("flops_fp16", 1),
    "sm__sass_thread_inst_executed_op_hmul_pred_on.sum": ("flops_fp16", 1),
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum": ("flops_fp64", 2),
    "sm__sass_thread_inst_executed_op_dadd_pred_on.sum": ("flops_fp64", 1),
    "sm__sass_thread_inst_executed_op_dmul_pred_on.sum": ("flops_fp64", 1),
    # Tensor-core work: ncu's operation count on the tensor pipe already counts a multiply-add
    # as two operations (checked on the H100: resnet18's first convolution, 0.47 G multiply-adds
    # with K padded from 147 to 160, reads 1.03 G ops).
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum": ("flops_tensor", 1),
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum": ("flops_tensor", 1),
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum": ("flops_tensor", 1),
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum": ("flops_tensor", 1),
}
OTHER_METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "duration_ns",
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__inst_executed_pipe_tensor.sum": "tensor_instructions",
}


@dataclass(frozen=True)
class CounterRow:
    """One profiled kernel launch (ncu's ID is the launch order in the profiled range)."""

    index: int
    name: str
    values: dict[str, float]

    def figures(self) -> dict[str, float]:
        return derive(self.values)


def wanted_metrics(available: set[str]) -> list[str]:
    """The metrics to request, given the base names the device's ncu lists."""
    names = [*FLOP_METRICS, *OTHER_METRICS]
    return [m for m in names if m.split(".", 1)[0] in available]


def parse_ncu_csv(text: str) -> list[CounterRow]:
    """ncu's ``--csv --page raw --print-units base`` output: one row per kernel launch."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        raise InvalidArgument("ncu printed no CSV rows; expected its --page raw table")
    rows = []
    for entry in csv.DictReader(io.StringIO("\n".join(lines))):
        if not entry.get("ID", "").strip().isdigit():
            continue  # the units row
        values = {}
        for key, raw in entry.items():
            if key in FLOP_METRICS or key in OTHER_METRICS:
                values[key] = _number(raw)
        rows.append(CounterRow(int(entry["ID"]), entry["Kernel Name"], values))
    rows.sort(key=lambda r: r.index)
    return rows


def derive(values: dict[str, float]) -> dict[str, float]:
    """Counter figures: flops per precision, DRAM bytes, occupancy, duration."""
    figures: dict[str, float] = {}
    for metric, (figure, weight) in FLOP_METRICS.items():
        if metric in values:
            figures[figure] = figures.get(figure, 0.0) + weight * values[metric]
    for metric, figure in OTHER_METRICS.items():
        if metric in values:
            figures[figure] = values[metric]
    figures["flops"] = sum(
        figures.get(k, 0.0) for k in ("flops_fp32", "flops_fp16", "flops_fp64", "flops_tensor")
    )
    return figures


def match_rows(kernel_names: Sequence[str], row_names: Sequence[str]) -> list[int | None]:
    """For each traced kernel (launch order), the index of its counter row, or None.

    The two runs launch the same sequence; an alignment on names (longest matching blocks)
    keeps the join right when one run has an extra or a missing launch.
    """
    result: list[int | None] = [None] * len(kernel_names)
    matcher = difflib.SequenceMatcher(a=list(kernel_names), b=list(row_names), autojunk=False)
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            result[block.a + offset] = block.b + offset
    return result


@dataclass(frozen=True)
class Peaks:
    """This GPU's measured ceilings (``mlms.tracer.peaks``)."""

    flops_fp32: float  # FLOP/s, plain FP32 (no TF32)
    flops_tensor: float  # FLOP/s, the tensor cores at the precision the model uses
    dram_bytes_per_s: float

    def to_dict(self) -> dict[str, float]:
        return {
            "flops_fp32": self.flops_fp32,
            "flops_tensor": self.flops_tensor,
            "dram_bytes_per_s": self.dram_bytes_per_s,
        }


def roofline(figures: dict[str, float], peaks: Peaks) -> dict[str, Any]:
    """Arithmetic intensity and whether the kernel is memory- or compute-bound.

    The compute ceiling is the tensor cores' when the kernel used them, else plain FP32; the
    kernel is memory-bound when its intensity is under the ridge point (ceiling / bandwidth).
    """
    moved = figures.get("dram_read_bytes", 0.0) + figures.get("dram_write_bytes", 0.0)
    flops = figures.get("flops", 0.0)
    ceiling = peaks.flops_tensor if figures.get("flops_tensor", 0.0) > 0 else peaks.flops_fp32
    ridge = ceiling / peaks.dram_bytes_per_s
    if moved <= 0:
        return {"arithmetic_intensity": None, "bound": "compute" if flops else "latency"}
    intensity = flops / moved
    return {
        "arithmetic_intensity": intensity,
        "ridge_point": ridge,
        "bound": "memory" if intensity < ridge else "compute",
    }


def _number(raw: str | None) -> float:
    text = (raw or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0
