"""XSP's kernel-level analyses and rooflines: queries over the ``gpu`` and ``layers`` views.

They read each trace's kernel run (the deepest leveled run that recorded kernels: ``hardware``
or ``full``); counter columns (flops, DRAM bytes, occupancy, roofline side) are filled where
the run had counters (``full``). Per-predict figures divide by the predicts of that batch size
in the run. Kernel names are shown demangled and shortened (``short_kernel_name``) but grouped
by their full name, so two template instances stay apart.
"""

from __future__ import annotations

import json

import pandas as pd

from mlms.analysis.engine import Spans
from mlms.tracer.communication import KERNEL_KINDS
from mlms.tracer.counters import Peaks

# GPU kernels, NCCL's (kind "communication") among them.
_KERNEL = f"kind IN {KERNEL_KINDS}"

_PREDICTS = """
    per_predict AS (
        SELECT trace_id, batch_size, count(*) AS predicts FROM predicts
        GROUP BY trace_id, batch_size
    )"""


def peaks_of(spans: Spans, trace_id: str | None = None) -> Peaks | None:
    """The peaks a ``full`` run recorded with its counters, or None."""
    where = "AND trace_id = ?" if trace_id else ""
    raw = spans.scalar(
        f"SELECT attributes FROM spans WHERE kind = 'counters' {where} LIMIT 1",
        [trace_id] if trace_id else None,
    )
    if raw is None:
        return None
    values = json.loads(raw)
    try:
        return Peaks(
            flops_fp32=values["peaks.flops_fp32"],
            flops_tensor=values["peaks.flops_tensor"],
            dram_bytes_per_s=values["peaks.dram_bytes_per_s"],
        )
    except KeyError:
        return None


def kernel_table(spans: Spans) -> pd.DataFrame:
    """What did each kernel launch do? One row per launch: duration, the layer that launched
    it, flops, DRAM read and write, achieved occupancy, arithmetic intensity, GFLOP/s and
    whether it is memory- or compute-bound."""
    return spans.frame(
        f"""
        SELECT g.trace_id, g.batch_size, l.name AS layer, n.kernel, g.kind, g.stream,
               (g.end_ns - g.start_ns) / 1e3 AS "duration (us)",
               g.counter_flops / 1e9 AS gflop,
               g.dram_read_bytes / 1e6 AS "dram read (MB)",
               g.dram_write_bytes / 1e6 AS "dram write (MB)",
               g.occupancy_pct AS "occupancy (%)",
               g.counter_flops / nullif(g.dram_read_bytes + g.dram_write_bytes, 0)
                   AS "flop/byte",
               g.counter_flops / nullif(coalesce(g.counter_duration_ns, g.end_ns - g.start_ns), 0)
                   AS "GFLOP/s",
               g.bound
        FROM gpu g LEFT JOIN layer_spans l ON l.id = g.layer
        JOIN kernel_names n USING (name_id)
        WHERE g.{_KERNEL}
        ORDER BY g.trace_id, g.start_ns
        """
    )


def kernel_breakdown(spans: Spans, top: int | None = None) -> pd.DataFrame:
    """Which kernels take the GPU's time? Per batch size and kernel: launches per predict, time
    per predict, share of all kernel time, duration statistics, medians of the counters.
    Largest first; ``top`` keeps that many per batch size."""
    limit = (
        f"QUALIFY row_number() OVER (PARTITION BY b.trace_id, b.batch_size ORDER BY b.total DESC)"
        f" <= {int(top)}"
        if top
        else ""
    )
    return spans.frame(
        f"""
        WITH {_PREDICTS},
        by_name AS (
            SELECT trace_id, batch_size, name_id, any_value(kind) AS kind, count(*) AS launches,
                   sum(end_ns - start_ns) AS total, avg(end_ns - start_ns) AS mean,
                   median(end_ns - start_ns) AS med, min(end_ns - start_ns) AS low,
                   max(end_ns - start_ns) AS high,
                   coalesce(stddev_samp(end_ns - start_ns), 0) AS std,
                   median(counter_flops) AS flops, median(dram_read_bytes + dram_write_bytes)
                       AS dram, median(occupancy_pct) AS occupancy, mode(bound) AS bound
            FROM gpu WHERE {_KERNEL} GROUP BY trace_id, batch_size, name_id
        )
        SELECT b.trace_id, b.batch_size, n.name, n.kernel, b.kind, b.launches,
               b.launches / p.predicts AS calls,
               b.total / p.predicts / 1e3 AS "gpu (us)",
               100 * b.total / sum(b.total) OVER (PARTITION BY b.trace_id, b.batch_size)
                   AS "share (%)",
               b.total / 1e3 AS "total (us)", b.mean / 1e3 AS "mean (us)",
               b.med / 1e3 AS "median (us)", b.low / 1e3 AS "min (us)",
               b.high / 1e3 AS "max (us)", b.std / 1e3 AS "std (us)",
               b.flops / 1e9 AS gflop, b.dram / 1e6 AS "dram (MB)",
               b.flops / nullif(b.dram, 0) AS "flop/byte", b.occupancy AS "occupancy (%)",
               b.bound
        FROM by_name b JOIN per_predict p USING (trace_id, batch_size)
        JOIN kernel_names n USING (name_id)
        {limit}
        ORDER BY b.trace_id, b.batch_size, b.total DESC
        """
    )


def layer_kernels(spans: Spans) -> pd.DataFrame:
    """Where is the device waiting? Per batch size and layer, medians over predicts of the
    layer's latency (critical path), GPU time (its kernels and copies) and non-GPU time (the
    rest: the framework or host in the way), with the counters of its kernels summed (flops,
    DRAM bytes), occupancy weighted by kernel time and the roofline side of most of its kernel
    time. Most non-GPU time first."""
    return spans.frame(
        f"""
        WITH kernels AS (
            SELECT layer, bound, end_ns - start_ns AS ns, counter_flops,
                   dram_read_bytes + dram_write_bytes AS dram, occupancy_pct
            FROM gpu WHERE {_KERNEL} AND layer IS NOT NULL
        ),
        bound_time AS (
            SELECT layer, bound, sum(ns) AS ns FROM kernels
            WHERE bound IS NOT NULL GROUP BY layer, bound
        ),
        counted AS (
            SELECT k.layer, sum(k.counter_flops) AS flops, sum(k.dram) AS dram,
                   sum(k.occupancy_pct * k.ns)
                       / nullif(sum(k.ns) FILTER (WHERE k.occupancy_pct IS NOT NULL), 0)
                       AS occupancy,
                   any_value(b.bound) AS bound
            FROM kernels k LEFT JOIN (
                SELECT layer, arg_max(bound, ns) AS bound FROM bound_time GROUP BY layer
            ) b USING (layer)
            GROUP BY k.layer
        ),
        executions AS (
            SELECT l.trace_id, l.batch_size, l.layer_index, l.name, l.kind, l.latency_ns,
                   l.gpu_ns, l.latency_ns - l.gpu_ns AS non_gpu_ns, l.kernels, c.flops, c.dram,
                   c.occupancy, c.bound
            FROM layers l LEFT JOIN counted c ON c.layer = l.id
            JOIN runs r ON r.trace_id = l.trace_id AND r.kernel_run IS NOT NULL
        )
        SELECT trace_id, batch_size, layer_index, name, any_value(kind) AS kind,
               median(latency_ns) / 1e3 AS "latency (us)", median(gpu_ns) / 1e3 AS "gpu (us)",
               median(non_gpu_ns) / 1e3 AS "non-gpu (us)", median(kernels) AS kernels,
               median(flops) / 1e9 AS gflop, median(dram) / 1e6 AS "dram (MB)",
               median(flops) / nullif(median(dram), 0) AS "flop/byte",
               median(occupancy) AS "occupancy (%)", mode(bound) AS bound
        FROM executions GROUP BY trace_id, batch_size, layer_index, name
        ORDER BY trace_id, batch_size, "non-gpu (us)" DESC
        """
    )


def roofline(spans: Spans, at: str) -> pd.DataFrame:
    """Where does the work sit against the GPU's ceilings? Points for a roofline plot at the
    ``kernel`` (per kernel name), ``layer`` or ``model`` (per batch size) level: arithmetic
    intensity (flop per DRAM byte) and achieved GFLOP/s (counted flops over kernel time), with
    the time each point stands for. Only kernels with counters (a ``full`` run) count."""
    group = {
        "kernel": "g.trace_id, g.batch_size, n.name, n.kernel",
        "layer": "g.trace_id, g.batch_size, l.layer_index, l.name",
        "model": "g.trace_id, g.batch_size",
    }.get(at)
    if group is None:
        raise ValueError(f"roofline level {at!r}: expected kernel, layer or model")
    return spans.frame(
        f"""
        WITH {_PREDICTS}
        SELECT {group}, sum(g.counter_flops) / p.predicts / 1e9 AS gflop,
               sum(g.dram_read_bytes + g.dram_write_bytes) / p.predicts / 1e6 AS "dram (MB)",
               sum(g.counter_flops) / nullif(sum(g.dram_read_bytes + g.dram_write_bytes), 0)
                   AS "flop/byte",
               sum(g.counter_flops) / nullif(sum(g.end_ns - g.start_ns), 0) AS "GFLOP/s",
               sum(g.end_ns - g.start_ns) / p.predicts / 1e3 AS "gpu (us)",
               sum(g.counter_tensor_flops) > 0 AS tensor
        FROM gpu g JOIN per_predict p USING (trace_id, batch_size)
        LEFT JOIN layer_spans l ON l.id = g.layer
        JOIN kernel_names n USING (name_id)
        WHERE g.{_KERNEL} AND g.counter_flops IS NOT NULL
        GROUP BY {group}, p.predicts
        ORDER BY "gpu (us)" DESC
        """
    )


def predict_kernel_time(spans: Spans) -> pd.DataFrame:
    """How much of a predict is kernel time? Per trace and batch size, the median over predicts
    of the kernel time inside each predict (the GPU's busy time, overlaps counted twice)."""
    return spans.frame(
        f"""
        WITH per_predict AS (
            SELECT p.trace_id, p.batch_size, p.span_id, p.duration_ns,
                   sum(g.end_ns - g.start_ns) AS kernel_ns
            FROM predicts p JOIN gpu g
              ON g.trace_id = p.trace_id AND g.{_KERNEL}
             AND g.start_ns >= p.start_ns AND g.end_ns <= p.end_ns
            GROUP BY p.trace_id, p.batch_size, p.span_id, p.duration_ns
        )
        SELECT trace_id, batch_size, median(kernel_ns) / 1e6 AS "kernel (ms)",
               median(duration_ns) / 1e6 AS "predict (ms)", count(*) AS predicts
        FROM per_predict GROUP BY trace_id, batch_size ORDER BY trace_id, batch_size
        """
    )
