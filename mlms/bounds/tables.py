"""A bound record as tables: what ``mlms bound`` prints and the report draws."""

from __future__ import annotations

import pandas as pd

from mlms.bounds.record import BoundRecord


def bound_summary(record: BoundRecord) -> pd.DataFrame:
    """One row per batch size: measured latency, both lower bounds, Benanza's ratios, and each
    what-if's latency."""
    rows = []
    for batch in record.batches:
        row: dict[str, object] = {
            "batch size": batch.batch_size,
            "measured (ms)": batch.measured_ms,
            "sequential LBL (ms)": batch.sequential_ms,
            "parallel LBL (ms)": batch.parallel_ms,
            "LBL/measured": batch.ratio,
            "parallel LBL/measured": batch.parallel_ratio,
        }
        for what_if in batch.what_ifs:
            row[f"if {what_if.name} (ms)"] = what_if.if_ms
        rows.append(row)
    return pd.DataFrame(rows)


def what_ifs(record: BoundRecord) -> pd.DataFrame:
    """Each what-if per batch size: latency now, latency if, the speed-up and why."""
    return pd.DataFrame(
        [
            {
                "batch size": batch.batch_size,
                "what if": w.name,
                "now (ms)": w.now_ms,
                "if (ms)": w.if_ms,
                "speed-up (x)": w.speedup,
                "detail": w.detail,
            }
            for batch in record.batches
            for w in batch.what_ifs
        ]
    )


def layer_bounds(record: BoundRecord) -> pd.DataFrame:
    """Every layer at every batch size: measured, the framework's implementation alone, the
    bound and the implementation that reaches it."""
    return pd.DataFrame(
        [
            {
                "batch size": batch.batch_size,
                "layer": layer.name,
                "kind": layer.kind,
                "measured (ms)": layer.measured_ms,
                "framework alone (ms)": layer.framework_ms,
                "bound (ms)": layer.bound_ms,
                "measured/bound": (
                    layer.measured_ms / layer.bound_ms
                    if layer.measured_ms is not None and layer.bound_ms > 0
                    else float("nan")
                ),
                "fastest": layer.bound_variant,
                "any precision (ms)": layer.any_precision_ms,
                "critical path": layer.on_critical_path,
            }
            for batch in record.batches
            for layer in batch.layers
        ]
    )


def slowest_layers(record: BoundRecord, top: int = 10) -> pd.DataFrame:
    """Per batch size, the layers with the most measured time, against their bounds."""
    table = layer_bounds(record)
    if table.empty:
        return table
    table = table.assign(_order=table["measured (ms)"].fillna(table["bound (ms)"]))
    return (
        table.sort_values(["batch size", "_order"], ascending=[True, False])
        .groupby("batch size")
        .head(top)
        .drop(columns="_order")
        .reset_index(drop=True)
    )
