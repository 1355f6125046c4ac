"""Across evaluations: the same model on two frameworks, machines or batch sizes side by side.

A side is a trace and a batch size (``Side``), so two batch sizes of one evaluation compare
as well as two evaluations. Layers are matched by type and occurrence (the n-th convolution
against the n-th convolution), which is the layer itself for the same framework and the
closest match across frameworks whose layer names differ; kernels by name.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from mlms.analysis.engine import Spans
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRecord, Predictions


class Side(NamedTuple):
    trace_id: str
    batch_size: int


def layer_differences(spans: Spans, base: Side, other: Side) -> pd.DataFrame:
    """Which layers differ most between two sides? Median latency on each, the difference and
    the ratio, largest absolute difference first; unmatched layers have one side empty."""
    return spans.frame(
        """
        WITH per_layer AS (
            SELECT trace_id, batch_size, layer_index, any_value(name) AS name,
                   any_value(kind) AS kind, median(latency_ns) / 1e6 AS ms
            FROM layers WHERE (trace_id = ? AND batch_size = ?) OR (trace_id = ? AND batch_size = ?)
            GROUP BY trace_id, batch_size, layer_index
        ), ranked AS (
            SELECT *, row_number() OVER (PARTITION BY trace_id, batch_size, kind
                                         ORDER BY layer_index) AS occurrence
            FROM per_layer
        ), a AS (SELECT * FROM ranked WHERE trace_id = ? AND batch_size = ?),
           b AS (SELECT * FROM ranked WHERE trace_id = ? AND batch_size = ?)
        SELECT coalesce(a.kind, b.kind) AS kind, coalesce(a.occurrence, b.occurrence)
                   AS occurrence,
               a.name AS "base layer", b.name AS "other layer",
               a.ms AS "base (ms)", b.ms AS "other (ms)", b.ms - a.ms AS "difference (ms)",
               b.ms / nullif(a.ms, 0) AS "ratio (x)"
        FROM a FULL JOIN b ON a.kind = b.kind AND a.occurrence = b.occurrence
        ORDER BY abs(coalesce(b.ms, 0) - coalesce(a.ms, 0)) DESC
        """,
        [*base, *other, *base, *other],
    )


def kernel_differences(spans: Spans, base: Side, other: Side) -> pd.DataFrame:
    """Which kernels differ most between two sides? GPU time per predict and launches per
    predict of each kernel name on each side, largest absolute difference first."""
    return spans.frame(
        """
        WITH per_predict AS (
            SELECT trace_id, batch_size, count(*) AS predicts FROM predicts
            GROUP BY trace_id, batch_size
        ), per_kernel AS (
            SELECT g.trace_id, g.batch_size, g.name_id,
                   sum(g.end_ns - g.start_ns) / p.predicts / 1e3 AS us,
                   count(*) / p.predicts AS calls
            FROM gpu g JOIN per_predict p USING (trace_id, batch_size)
            WHERE g.kind = 'kernel'
              AND ((g.trace_id = ? AND g.batch_size = ?) OR (g.trace_id = ? AND g.batch_size = ?))
            GROUP BY g.trace_id, g.batch_size, g.name_id, p.predicts
        ), a AS (SELECT * FROM per_kernel WHERE trace_id = ? AND batch_size = ?),
           b AS (SELECT * FROM per_kernel WHERE trace_id = ? AND batch_size = ?)
        SELECT n.name, n.kernel, a.us AS "base (us)", b.us AS "other (us)",
               coalesce(b.us, 0) - coalesce(a.us, 0) AS "difference (us)",
               a.calls AS "base calls", b.calls AS "other calls"
        FROM a FULL JOIN b ON a.name_id = b.name_id
        JOIN kernel_names n ON n.name_id = coalesce(a.name_id, b.name_id)
        ORDER BY abs("difference (us)") DESC
        """,
        [*base, *other, *base, *other],
    )


def prediction_divergence(base: EvaluationRecord, other: EvaluationRecord) -> pd.DataFrame:
    """Do two evaluations predict the same? Over the inputs both recorded: how often the top-1
    class agrees, the mean overlap of the top-5 sets, and the largest difference of the top-1
    probability where the top-1 class agrees. One row."""
    a, b = _predictions_of(base), _predictions_of(other)
    if a.inputs != b.inputs:
        raise InvalidArgument(
            f"evaluations {base.id} and {other.id} predicted different inputs "
            f"({a.inputs!r} and {b.inputs!r}): expected the same input source and seed"
        )
    count = min(len(a.top5), len(b.top5))
    top_a, top_b = np.array(a.top5[:count]), np.array(b.top5[:count])
    p_a, p_b = np.array(a.probabilities[:count]), np.array(b.probabilities[:count])
    agree = top_a[:, 0] == top_b[:, 0]
    overlap = [len(set(x) & set(y)) / len(x) for x, y in zip(top_a, top_b, strict=True)]
    largest = float(np.abs(p_a[agree, 0] - p_b[agree, 0]).max()) if agree.any() else None
    return pd.DataFrame(
        [
            {
                "base": base.id,
                "other": other.id,
                "inputs": count,
                "top-1 agreement (%)": 100 * float(agree.mean()),
                "top-5 overlap (%)": 100 * float(np.mean(overlap)),
                "max top-1 probability difference": largest,
            }
        ]
    )


def _predictions_of(record: EvaluationRecord) -> Predictions:
    if record.predictions is None:
        raise InvalidArgument(
            f"evaluation {record.id} has no predictions to compare (records made before mlms "
            "kept them, and imported traces, have none): evaluate the model again"
        )
    return record.predictions
