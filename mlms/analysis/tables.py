"""First XSP tables, each a pure function over the span table or the record.

Column names carry their unit ("p50 (ms)"). Layer tables read the FRAMEWORK spans of the
deepest leveled run; a layer's batch size comes from the MODEL span it lies in.
"""

from __future__ import annotations

import json

import pandas as pd

from mlms.evaluation.record import EvaluationRecord
from mlms.tracer.levels import TraceLevel


def latency_by_batch(record: EvaluationRecord) -> pd.DataFrame:
    """Latency and throughput per batch size, with each leveled run's slowdown."""
    rows = []
    for result in record.results:
        stats = result.latency_ms
        row = {
            "batch size": result.batch_size,
            "iterations": result.iterations,
            "p50 (ms)": stats.p50,
            "p90 (ms)": stats.p90,
            "p99 (ms)": stats.p99,
            "mean (ms)": stats.mean,
            "trimmed mean (ms)": stats.trimmed_mean,
            "throughput (inputs/s)": result.throughput,
        }
        for label, level in result.levels.items():
            if label != TraceLevel.MODEL.label:
                row[f"{label} overhead (x)"] = level.overhead
        rows.append(row)
    return pd.DataFrame(rows)


def layer_spans(spans: pd.DataFrame) -> pd.DataFrame:
    """One row per layer execution: batch size, iteration (its model span), layer, duration."""
    layers = spans[spans["level"] == int(TraceLevel.FRAMEWORK)]
    if layers.empty:
        return pd.DataFrame(
            columns=[
                "batch_size",
                "model_span",
                "layer_index",
                "name",
                "kind",
                "duration (ms)",
                "run",
            ]
        )
    deepest = layers["run"].max()
    layers = layers[layers["run"] == deepest]
    models = spans[spans["level"] == int(TraceLevel.MODEL)][["span_id", "attributes"]]
    batch = models.assign(
        batch_size=models["attributes"].map(lambda a: json.loads(a).get("mlms.batch_size"))
    )[["span_id", "batch_size"]]
    joined = layers.merge(batch, left_on="parent_id", right_on="span_id", suffixes=("", "_m"))
    return pd.DataFrame(
        {
            "batch_size": joined["batch_size"].astype("int64"),
            "model_span": joined["parent_id"],
            "layer_index": joined["layer_index"].astype("int64"),
            "name": joined["name"],
            "kind": joined["kind"],
            "duration (ms)": (joined["end_ns"] - joined["start_ns"]) / 1e6,
            "run": joined["run"],
        }
    )


def slowest_layers(spans: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """The layers with the largest median latency, per batch size."""
    layers = layer_spans(spans)
    per_layer = layers.groupby(["batch_size", "layer_index", "name", "kind"], as_index=False).agg(
        **{"median (ms)": ("duration (ms)", "median"), "calls": ("duration (ms)", "size")}
    )
    model_total = per_layer.groupby("batch_size")["median (ms)"].transform("sum")
    per_layer["share (%)"] = 100 * per_layer["median (ms)"] / model_total
    ordered = per_layer.sort_values(["batch_size", "median (ms)"], ascending=[True, False])
    return ordered.groupby("batch_size").head(top).reset_index(drop=True)


def latency_by_layer_type(spans: pd.DataFrame) -> pd.DataFrame:
    """Per batch size and layer type: layers, summed median latency and its share."""
    layers = layer_spans(spans)
    per_layer = layers.groupby(["batch_size", "layer_index", "kind"], as_index=False)[
        "duration (ms)"
    ].median()
    by_kind = per_layer.groupby(["batch_size", "kind"], as_index=False).agg(
        **{"layers": ("layer_index", "size"), "latency (ms)": ("duration (ms)", "sum")}
    )
    total = by_kind.groupby("batch_size")["latency (ms)"].transform("sum")
    by_kind["share (%)"] = 100 * by_kind["latency (ms)"] / total
    return by_kind.sort_values(["batch_size", "latency (ms)"], ascending=[True, False]).reset_index(
        drop=True
    )
