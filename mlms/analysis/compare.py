"""One model on several frameworks, side by side: latency, throughput, energy, accuracy and
layers per batch size.

A pure function over evaluation records and their spans. Latencies come from each record's
model-level run; layer counts and layer-type shares from its layer run, in the shared
layer-type vocabulary, so frameworks compare kind by kind.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from mlms.analysis.engine import Spans
from mlms.analysis.layers import layer_types
from mlms.analysis.model import joules_per_inference
from mlms.evaluation.record import EvaluationRecord

#: Layer types shown per row, largest share first.
TOP_KINDS = 3
COLUMNS = [
    "framework",
    "version",
    "options",
    "batch size",
    "p50 (ms)",
    "p99 (ms)",
    "throughput (inputs/s)",
    "energy (J/inference)",
    "accuracy",
    "layers",
    "top layer types (share of layer time)",
    "evaluation",
]


def run_options(record: EvaluationRecord) -> str:
    """What the evaluation ran as, beyond model and framework: precision, compile mode,
    memory format, sequence length and where its inputs were."""
    request, settings = record.request, record.settings
    parts = [request.precision]
    if request.compile is not None:
        mode = settings.get("mode") or settings.get("graph_optimization") or request.compile
        parts.append(f"compile: {mode}")
    if request.channels_last:
        parts.append("channels-last")
    if request.cudnn_benchmark:
        parts.append("cudnn benchmark")
    if request.seq_len is not None:
        parts.append(f"seq-len {request.seq_len}")
    if request.input_on_device:
        parts.append("input on device")
    return ", ".join(parts)


def compare_frameworks(records: Sequence[EvaluationRecord], spans: Spans) -> pd.DataFrame:
    """One row per framework and batch size, in the order of ``records``.

    ``spans`` holds the records' traces; a record without a trace (or without layer spans)
    gets no layer columns."""
    kinds = layer_types(spans)
    rows = []
    for record in records:
        mine = kinds[kinds["trace_id"] == record.trace_id]
        for result in record.results:
            shares = mine[mine["batch_size"] == result.batch_size]
            top = ", ".join(
                f"{kind} {share:.0f}%"
                for kind, share in zip(
                    shares["kind"][:TOP_KINDS], shares["share (%)"][:TOP_KINDS], strict=True
                )
            )
            rows.append(
                {
                    "framework": record.framework.name,
                    "version": record.framework.version,
                    "options": run_options(record),
                    "batch size": result.batch_size,
                    "p50 (ms)": result.latency_ms.p50,
                    "p99 (ms)": result.latency_ms.p99,
                    "throughput (inputs/s)": result.throughput,
                    "energy (J/inference)": joules_per_inference(result),
                    # The task's metrics on the data set (the first batch size's pass).
                    "accuracy": record.accuracy.line() if record.accuracy else "",
                    "layers": int(shares["layers"].sum()) if not shares.empty else None,
                    "top layer types (share of layer time)": top,
                    "evaluation": record.id[:12],
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)
