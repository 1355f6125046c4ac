"""XSP's layer-level analyses: each a query over the ``layers`` view of ``Spans``.

A layer is one slot of a predict's execution order (``layer_index``): a module called twice
is two layers. Latencies are medians over the predicts of the layer run (``mlms.analysis.engine``
says which run, and what a layer's latency is on a GPU). Column names carry their unit.
"""

from __future__ import annotations

import pandas as pd

from mlms.analysis.engine import FRAMEWORK, Spans

_KEYS = "trace_id, batch_size, layer_index, name"


def layer_table(spans: Spans) -> pd.DataFrame:
    """What does each layer cost, and how steady is it?

    One row per trace, batch size and layer, in execution order: type, shapes, parameters,
    MACs and FLOPs (the framework's own count), output (activation) and allocated bytes, and
    latency as median with its spread (interquartile range, standard deviation, coefficient of
    variation, min, max) over the predicts."""
    return spans.frame(
        f"""
        WITH shapes AS (
            SELECT s.trace_id, s.batch_size, s.layer_index, s.name,
                   CAST(any_value(s.input_shapes) AS VARCHAR) AS inputs,
                   CAST(any_value(s.output_shapes) AS VARCHAR) AS outputs
            FROM spans s JOIN runs r ON s.trace_id = r.trace_id AND s.run = r.layer_run
            WHERE s.level = {FRAMEWORK} AND s.layer_index IS NOT NULL
            GROUP BY s.trace_id, s.batch_size, s.layer_index, s.name
        ), per_layer AS (
            SELECT {_KEYS}, any_value(kind) AS kind, any_value(op_type) AS op_type,
                   any_value(params) AS params,
                   median(flops) AS flops,
                   median(activation_bytes) AS activation_bytes,
                   median(allocated_bytes) AS allocated_bytes,
                   median(latency_ns) AS median_ns,
                   quantile_cont(latency_ns, 0.75) - quantile_cont(latency_ns, 0.25) AS iqr_ns,
                   coalesce(stddev_samp(latency_ns), 0) AS std_ns, avg(latency_ns) AS mean_ns,
                   min(latency_ns) AS min_ns, max(latency_ns) AS max_ns, count(*) AS executions
            FROM layers GROUP BY {_KEYS}
        )
        SELECT p.trace_id, p.batch_size, p.layer_index, p.name, p.kind, p.op_type,
               s.inputs AS "input shapes", s.outputs AS "output shapes", p.params,
               p.flops / 2e6 AS "MACs (M)", p.flops / 1e9 AS "GFLOPs",
               p.activation_bytes / 1e6 AS "activations (MB)",
               p.allocated_bytes / 1e6 AS "allocated (MB)",
               p.median_ns / 1e6 AS "latency (ms)", p.iqr_ns / 1e6 AS "iqr (ms)",
               p.std_ns / 1e6 AS "std (ms)", 100 * p.std_ns / nullif(p.mean_ns, 0) AS "cv (%)",
               p.min_ns / 1e6 AS "min (ms)", p.max_ns / 1e6 AS "max (ms)", p.executions
        FROM per_layer p LEFT JOIN shapes s USING (trace_id, batch_size, layer_index, name)
        ORDER BY p.trace_id, p.batch_size, p.layer_index
        """
    )


def slowest_layers(spans: Spans, top: int = 10) -> pd.DataFrame:
    """Which layers take the most time? The ``top`` largest median latencies per batch size,
    with each one's share of the summed layer medians."""
    table = layer_table(spans)
    if table.empty:
        return table
    total = table.groupby(["trace_id", "batch_size"])["latency (ms)"].transform("sum")
    table["share (%)"] = 100 * table["latency (ms)"] / total
    ordered = table.sort_values(
        ["trace_id", "batch_size", "latency (ms)"], ascending=[True, True, False]
    )
    columns = ["trace_id", "batch_size", "layer_index", "name", "kind", "latency (ms)"]
    columns += ["share (%)"]
    columns += ["cv (%)", "GFLOPs", "executions"]
    return ordered.groupby(["trace_id", "batch_size"]).head(top)[columns].reset_index(drop=True)


def layer_executions(spans: Spans) -> pd.DataFrame:
    """How is each layer's latency distributed? One row per execution (box plots, variance)."""
    return spans.frame(
        f"""
        SELECT {_KEYS}, kind, model_span, latency_ns / 1e6 AS "latency (ms)"
        FROM layers ORDER BY trace_id, batch_size, layer_index, start_ns
        """
    )


def layer_types(spans: Spans) -> pd.DataFrame:
    """Where does the time go by kind of layer? Per batch size and layer type: occurrences per
    predict, summed median latency and its share, the summed median time of the layers'
    kernels and copies on the GPU (0 without the hardware level: on a GPU the framework level's
    latency is then the host's, each call returning once its kernels are queued), MACs,
    activation and allocated memory."""
    return spans.frame(
        f"""
        WITH per_layer AS (
            SELECT {_KEYS}, any_value(kind) AS kind, median(latency_ns) AS latency_ns,
                   median(gpu_ns) AS gpu_ns,
                   median(flops) AS flops, median(activation_bytes) AS activation_bytes,
                   median(allocated_bytes) AS allocated_bytes
            FROM layers GROUP BY {_KEYS}
        )
        SELECT trace_id, batch_size, kind, count(*) AS layers,
               sum(latency_ns) / 1e6 AS "latency (ms)",
               100 * sum(latency_ns) / sum(sum(latency_ns)) OVER (PARTITION BY trace_id, batch_size)
                   AS "share (%)",
               sum(gpu_ns) / 1e6 AS "GPU (ms)",
               sum(flops) / 2e6 AS "MACs (M)",
               sum(activation_bytes) / 1e6 AS "activations (MB)",
               sum(allocated_bytes) / 1e6 AS "allocated (MB)"
        FROM per_layer GROUP BY trace_id, batch_size, kind
        ORDER BY trace_id, batch_size, "latency (ms)" DESC
        """
    )


def model_costs(spans: Spans) -> pd.DataFrame:
    """How big is the model? Per trace and batch size: layers, parameters, MACs and FLOPs per
    predict (framework-counted), activation bytes."""
    return spans.frame(
        f"""
        WITH per_layer AS (
            SELECT {_KEYS}, any_value(params) AS params, median(flops) AS flops,
                   median(activation_bytes) AS activation_bytes
            FROM layers GROUP BY {_KEYS}
        )
        SELECT trace_id, batch_size, count(*) AS layers, sum(params)::BIGINT AS params,
               sum(flops) / 2e9 AS "GMACs", sum(flops) / 1e9 AS "GFLOPs",
               sum(activation_bytes) / 1e6 AS "activations (MB)"
        FROM per_layer GROUP BY trace_id, batch_size ORDER BY trace_id, batch_size
        """
    )
