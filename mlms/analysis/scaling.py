"""How a model scales over GPUs: the same model and batch sizes evaluated on 1, 2, ... GPUs
(tensor parallelism), side by side.

A pure function over evaluation records, as ``mlms.analysis.compare`` is: latencies are each
record's model-level run (with several ranks, the slowest rank's per iteration), energy its
joules per inference. A record's GPU count is its ranks (``record_ranks``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from mlms.analysis.model import joules_per_inference
from mlms.analysis.record_ranks import record_ranks
from mlms.evaluation.record import EvaluationRecord

COLUMNS = [
    "model",
    "batch size",
    "GPUs",
    "p50 (ms)",
    "throughput (inputs/s)",
    "speedup (x)",
    "efficiency (%)",
    "energy (J/inference)",
    "evaluation",
]
_DERIVED = ("speedup (x)", "efficiency (%)")


def scaling(records: Sequence[EvaluationRecord]) -> pd.DataFrame:
    """What do more GPUs buy? Per model and batch size, each evaluation's GPUs, p50 latency,
    throughput, speedup over the run with the fewest GPUs (its p50 over this one's; of several
    such runs, the fastest), parallel
    efficiency (speedup per GPU added, relative to that run's GPUs) and energy per inference.
    Only batch sizes evaluated at two or more GPU counts appear."""
    rows = [
        {
            "model": record.model.name,
            "batch size": result.batch_size,
            "GPUs": record_ranks(record),
            "p50 (ms)": result.latency_ms.p50,
            "throughput (inputs/s)": result.throughput,
            "energy (J/inference)": joules_per_inference(result),
            "evaluation": record.id,
        }
        for record in records
        for result in record.results
    ]
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in _DERIVED])
    if table.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = ["model", "batch size"]
    table = table[table.groupby(keys)["GPUs"].transform("nunique") > 1]
    table = table.sort_values([*keys, "GPUs", "p50 (ms)"]).reset_index(drop=True)
    base = table.groupby(keys).transform("first")
    table["speedup (x)"] = base["p50 (ms)"] / table["p50 (ms)"]
    table["efficiency (%)"] = 100 * table["speedup (x)"] / (table["GPUs"] / base["GPUs"])
    return table[COLUMNS]
