"""XSP's GPU tables: each layer's kernels, GPU and non-GPU time, counters; the top kernels.

Pure functions over the span table of an evaluation traced at ``hardware`` or ``full`` on a GPU.
They read the deepest leveled run that recorded kernels, rebuild the layer -> API call ->
kernel join (``mlms.tracer.join.layer_gpu``: a layer's latency on the critical path, its GPU
time the sum of its kernels, its non-GPU time the rest) and add up the counter figures that the
``full`` run attached to each kernel (flops, DRAM bytes, occupancy, roofline bound).
"""

from __future__ import annotations

import functools
import json

import cxxfilt
import pandas as pd

from mlms.tracer.archive import records_of
from mlms.tracer.join import layer_gpu
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import SpanRecord

LAYER_COLUMNS = [
    "batch_size",
    "layer_index",
    "name",
    "kind",
    "latency (us)",
    "gpu (us)",
    "non-gpu (us)",
    "kernels",
    "gflop",
    "dram (MB)",
    "flop/byte",
    "bound",
]
KERNEL_COLUMNS = [
    "batch_size",
    "kernel",
    "calls",
    "gpu (us)",
    "share (%)",
    "median (us)",
    "gflop",
    "dram (MB)",
    "flop/byte",
    "occupancy (%)",
    "bound",
]


def gpu_layers(spans: pd.DataFrame) -> pd.DataFrame:
    """Per batch size and layer: medians over iterations of latency, GPU and non-GPU time.

    Counter columns (gflop, dram, flop/byte, bound) are filled when the run had counters
    (``full``); ``bound`` is the roofline side that holds most of the layer's kernel time.
    """
    run = _gpu_run(spans)
    if run is None:
        return pd.DataFrame(columns=LAYER_COLUMNS)
    batch_of = _batch_sizes(spans, run)
    rows = []
    # One CUPTI collection per batch size, and CUPTI restarts its correlation ids after each
    # (the collector detaches CUPTI when it stops): join each batch size on its own.
    for batch_size in sorted({b for b in batch_of.values() if b is not None}):
        mine = [r for r in run if batch_of[r.span_id] == batch_size]
        layers = [r for r in mine if r.level == TraceLevel.FRAMEWORK]
        api = [r for r in mine if r.level == TraceLevel.SYSTEM_LIBRARY]
        gpu = [r for r in mine if r.level == TraceLevel.HARDWARE and r.kind != "counters"]
        for layer, joined in zip(layers, layer_gpu(layers, api, gpu), strict=True):
            kernels = [gpu[i] for i in joined.kernels]
            rows.append(
                {
                    "batch_size": batch_size,
                    "layer_index": layer.layer_index,
                    "name": layer.name,
                    "kind": layer.kind,
                    "latency (us)": joined.latency_ns / 1e3,
                    "gpu (us)": joined.gpu_ns / 1e3,
                    "non-gpu (us)": joined.non_gpu_ns / 1e3,
                    "kernels": len(kernels),
                    **_counter_sums(kernels),
                }
            )
    if not rows:
        return pd.DataFrame(columns=LAYER_COLUMNS)
    executions = pd.DataFrame(rows)
    keys = ["batch_size", "layer_index", "name", "kind"]
    table = executions.groupby(keys, as_index=False, dropna=False).agg(
        **{
            column: (column, "median")
            for column in ("latency (us)", "gpu (us)", "non-gpu (us)", "kernels", "gflop")
        },
        **{"dram (MB)": ("dram (MB)", "median"), "bound": ("bound", _most_common)},
    )
    table["flop/byte"] = _intensity(table["gflop"], table["dram (MB)"])
    return table[LAYER_COLUMNS].sort_values(
        ["batch_size", "non-gpu (us)"], ascending=[True, False], ignore_index=True
    )


def top_kernels(spans: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """Per batch size, the kernels (by demangled name) that take the most GPU time per predict."""
    run = _gpu_run(spans)
    if run is None:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    kernels = [r for r in run if r.kind == "kernel"]
    batch_of = _batch_sizes(spans, kernels)
    predicts = _predicts_per_batch(spans, run)
    rows = [
        {
            "batch_size": batch_of[k.span_id],
            "kernel": short_kernel_name(k.name),
            "duration (us)": k.duration_ns / 1e3,
            **_counter_sums([k]),
            "occupancy (%)": k.attributes.get("counter.achieved_occupancy_pct"),
        }
        for k in kernels
        if batch_of.get(k.span_id) is not None
    ]
    if not rows:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    frame = pd.DataFrame(rows)
    table = frame.groupby(["batch_size", "kernel"], as_index=False).agg(
        launches=("duration (us)", "size"),
        total=("duration (us)", "sum"),
        **{"median (us)": ("duration (us)", "median")},
        gflop=("gflop", "median"),
        **{"dram (MB)": ("dram (MB)", "median")},
        **{"occupancy (%)": ("occupancy (%)", "median")},
        bound=("bound", _most_common),
    )
    per_predict = table["batch_size"].map(predicts)
    table["calls"] = table["launches"] / per_predict
    table["gpu (us)"] = table["total"] / per_predict
    all_kernels = table.groupby("batch_size")["total"].transform("sum")
    table["share (%)"] = 100 * table["total"] / all_kernels
    table["flop/byte"] = _intensity(table["gflop"], table["dram (MB)"])
    ordered = table.sort_values(["batch_size", "gpu (us)"], ascending=[True, False])
    return ordered.groupby("batch_size").head(top)[KERNEL_COLUMNS].reset_index(drop=True)


@functools.lru_cache(maxsize=4096)
def short_kernel_name(name: str, limit: int = 60) -> str:
    """The demangled function name without its template and parameter lists, at most ``limit``."""
    text = cxxfilt.demangle(name, external_only=False) if name.startswith("_Z") else name
    depth, kept = 0, []
    for char in text:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif depth == 0:
            kept.append(char)
    bare = "".join(kept).split(" ")[-1] or text  # drop a return type ("void ")
    return bare if len(bare) <= limit else bare[: limit - 1] + "…"


def _gpu_run(spans: pd.DataFrame) -> list[SpanRecord] | None:
    """The spans of the deepest leveled run that recorded kernels, or None."""
    kernels = spans[spans["kind"] == "kernel"]
    if kernels.empty:
        return None
    return records_of(spans[spans["run"] == kernels["run"].max()])


def _batch_sizes(spans: pd.DataFrame, records: list[SpanRecord]) -> dict[str, int | None]:
    """span id -> the batch size of the MODEL span above it (by parent links)."""
    parent = dict(zip(spans["span_id"], spans["parent_id"], strict=True))
    models = spans[spans["level"] == int(TraceLevel.MODEL)]
    batch = {
        span_id: json.loads(attributes).get("mlms.batch_size")
        for span_id, attributes in zip(models["span_id"], models["attributes"], strict=True)
    }
    result = {}
    for record in records:
        current = record.parent_id
        while current is not None and current not in batch:
            current = parent.get(current)
        result[record.span_id] = batch.get(current) if current is not None else None
    return result


def _predicts_per_batch(spans: pd.DataFrame, run: list[SpanRecord]) -> dict[int, int]:
    models = [r for r in run if r.level == TraceLevel.MODEL]
    sizes = [r.attributes.get("mlms.batch_size") for r in models]
    return {size: sizes.count(size) for size in set(sizes) if size is not None}


def _counter_sums(kernels: list[SpanRecord]) -> dict[str, object]:
    measured = [k for k in kernels if "counter.duration_ns" in k.attributes]
    if not measured:
        return {"gflop": None, "dram (MB)": None, "bound": None}
    time_by_bound: dict[str, int] = {}
    for k in measured:
        bound = k.attributes.get("counter.bound", "unknown")
        time_by_bound[bound] = time_by_bound.get(bound, 0) + k.duration_ns
    return {
        "gflop": sum(k.attributes.get("counter.flops", 0.0) for k in measured) / 1e9,
        "dram (MB)": sum(
            k.attributes.get("counter.dram_read_bytes", 0.0)
            + k.attributes.get("counter.dram_write_bytes", 0.0)
            for k in measured
        )
        / 1e6,
        "bound": max(time_by_bound, key=time_by_bound.__getitem__),
    }


def _intensity(gflop: pd.Series, dram_mb: pd.Series) -> pd.Series:
    gflop, dram_mb = gflop.astype("float64"), dram_mb.astype("float64")
    return (gflop * 1e9 / (dram_mb * 1e6)).where(dram_mb > 0)


def _most_common(values: pd.Series) -> object:
    counts = values.dropna().value_counts()
    return counts.index[0] if not counts.empty else None
