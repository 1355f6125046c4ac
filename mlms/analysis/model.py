"""XSP's model-level analyses: latency and throughput against batch size, leveled overheads.

Pure functions over evaluation records: the model-level latencies are the record's (its
model-level run, no profiler attached); each deeper leveled run's slowdown is read from it too.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from mlms.evaluation.record import EvaluationRecord
from mlms.tracer.levels import TraceLevel


def latency_by_batch(record: EvaluationRecord) -> pd.DataFrame:
    """How do latency and throughput scale with batch size? Percentiles, mean, trimmed mean,
    throughput and each leveled run's slowdown (x) per batch size."""
    rows = []
    for result in record.results:
        stats = result.latency_ms
        row = {
            "batch size": result.batch_size,
            "iterations": result.iterations,
            "p50 (ms)": stats.p50,
            "p90 (ms)": stats.p90,
            "p95 (ms)": stats.p95,
            "p99 (ms)": stats.p99,
            "mean (ms)": stats.mean,
            "trimmed mean (ms)": stats.trimmed_mean,
            "throughput (inputs/s)": result.throughput,
        }
        if result.samples is not None:
            row["samples"] = result.samples
        for label, level in result.levels.items():
            if label != TraceLevel.MODEL.label:
                row[f"{label} overhead (x)"] = level.overhead
        rows.append(row)
    return pd.DataFrame(rows)


def leveled_overheads(records: Sequence[EvaluationRecord]) -> pd.DataFrame:
    """What does each profiling level cost? One row per evaluation, batch size and leveled run:
    its p50 latency and its slowdown against the model-level run."""
    rows = [
        {
            "evaluation": record.id,
            "batch size": result.batch_size,
            "level": label,
            "run": level.run,
            "p50 (ms)": level.latency_ms.get("p50"),
            "overhead (x)": level.overhead,
            "spans": level.spans,
        }
        for record in records
        for result in record.results
        for label, level in result.levels.items()
    ]
    columns = ["evaluation", "batch size", "level", "run", "p50 (ms)", "overhead (x)", "spans"]
    return pd.DataFrame(rows, columns=columns)
