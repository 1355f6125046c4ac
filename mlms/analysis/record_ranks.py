"""How many ranks (GPUs, processes) an evaluation ran on, from its record alone: whether the
CLI, the report and the UI have a distributed section to show, without reading its trace."""

from __future__ import annotations

from mlms.evaluation.record import EvaluationRecord


def record_ranks(record: EvaluationRecord) -> int:
    """Its request's tensor parallelism, or the rank traces an import joined (the record's
    ``ranks`` setting, ``mlms.analysis.kineto_record``); one for everything else."""
    imported = record.settings.get("ranks")
    if imported:
        return len(str(imported).split(", "))
    return int(getattr(record.request, "tensor_parallel", 1) or 1)
