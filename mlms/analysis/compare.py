"""One model on several frameworks, side by side: latency, throughput and layers per batch size.

A pure function over evaluation records and their span tables. Latencies come from each
record's model-level run; layer counts and layer-type shares from its FRAMEWORK spans (the
framework-level run), in the shared layer-type vocabulary, so frameworks compare kind by kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from mlms.analysis.tables import latency_by_layer_type, layer_spans
from mlms.evaluation.record import EvaluationRecord

#: Layer types shown per row, largest share first.
TOP_KINDS = 3
COLUMNS = [
    "framework",
    "version",
    "batch size",
    "p50 (ms)",
    "p99 (ms)",
    "throughput (inputs/s)",
    "layers",
    "top layer types (share of layer time)",
    "evaluation",
]


def compare_frameworks(
    records: Sequence[EvaluationRecord], spans_of: Callable[[str], pd.DataFrame]
) -> pd.DataFrame:
    """One row per framework and batch size, in the order of ``records``.

    ``spans_of(trace_id)`` gives a record's span table; records without a trace (or without
    FRAMEWORK spans) get no layer columns."""
    rows = []
    for record in records:
        spans = spans_of(record.trace_id) if record.trace_id else None
        layers = layer_spans(spans) if spans is not None else None
        kinds = latency_by_layer_type(spans) if spans is not None else None
        for result in record.results:
            count, top = _layers_of(layers, kinds, result.batch_size)
            rows.append(
                {
                    "framework": record.framework.name,
                    "version": record.framework.version,
                    "batch size": result.batch_size,
                    "p50 (ms)": result.latency_ms.p50,
                    "p99 (ms)": result.latency_ms.p99,
                    "throughput (inputs/s)": result.throughput,
                    "layers": count,
                    "top layer types (share of layer time)": top,
                    "evaluation": record.id[:12],
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def _layers_of(
    layers: pd.DataFrame | None, kinds: pd.DataFrame | None, batch_size: int
) -> tuple[int | None, str]:
    """(layer executions per predict, "conv 61%, batchnorm 12%, ...") for one batch size."""
    if layers is None or kinds is None:
        return None, ""
    mine = layers[layers["batch_size"] == batch_size]
    if mine.empty:
        return None, ""
    per_predict = int(mine.groupby("model_span").size().median())
    shares = kinds[kinds["batch_size"] == batch_size].head(TOP_KINDS)
    top = ", ".join(
        f"{kind} {share:.0f}%"
        for kind, share in zip(shares["kind"], shares["share (%)"], strict=True)
    )
    return per_predict, top
