"""The report's section on several ranks: for each evaluation that ran on (or imported) more
than one rank, the per-rank temporal breakdown as a stacked bar, the communication overlap,
the rank skew and the collectives; and, where the report holds the same model at several GPU
counts, how it scales. Absent from a report of single-rank evaluations."""

from __future__ import annotations

from collections.abc import Sequence

from mlms.analysis import distributed
from mlms.analysis.engine import Spans
from mlms.analysis.record_ranks import record_ranks
from mlms.analysis.scaling import scaling
from mlms.evaluation.record import EvaluationRecord
from mlms.report import figures
from mlms.report.evaluations import label, short_label
from mlms.report.html import Section, absent, figure, question, table
from mlms.report.levels import own_spans

#: Iterations of the rank skew shown per evaluation (the table holds them all).
SKEW_ROWS = 20


def ranks_section(records: Sequence[EvaluationRecord], spans: Spans) -> Section | None:
    """The section, or None when no evaluation has several ranks or GPU counts."""
    several = {r.id for r in records if record_ranks(r) > 1}
    scaled = scaling(records)
    if not several and scaled.empty:
        return None
    section = Section("Ranks (several GPUs)", "ranks", "Ranks")
    section.add(
        question(
            "Where does each rank's time go (compute, communication, memory copies, idle), how "
            "much communication hides under computation, which rank holds each iteration up, "
            "what bandwidth do the collectives reach, and what do more GPUs buy?"
        )
    )
    if not scaled.empty:
        section.add(table(scaled, "scaling over GPUs (speedup over the fewest GPUs)"))
    for index, record in enumerate(records):
        if record.id in several:
            part = section.child(label(record), f"ranks-{index}", short_label(record))
            part.add(*_record_blocks(record, own_spans(spans, record), index))
    return section


def _record_blocks(record: EvaluationRecord, spans: Spans | None, index: int) -> list[str]:
    if spans is None:
        return [absent("no trace was recorded (trace level no_trace)")]
    breakdown = distributed.rank_breakdown(spans).drop(columns="trace_id")
    if breakdown["rank"].nunique() < 2:
        ranks = record_ranks(record)
        return [absent(f"the trace holds one rank's spans of the {ranks} the evaluation ran on")]
    skew = distributed.rank_skew(spans).drop(columns="trace_id")
    return [
        figure(figures.rank_breakdown(breakdown), f"rank-breakdown-{index}"),
        table(breakdown, "temporal breakdown per rank (HTA's definition)"),
        table(
            distributed.comm_overlap(spans).drop(columns="trace_id"),
            "communication overlapped by computation",
        ),
        table(
            skew[skew["iteration"] < SKEW_ROWS],
            f"rank skew, first {SKEW_ROWS} iterations (wait: how long after this rank the last "
            "one joined its collectives)",
        ),
        table(
            distributed.collectives(spans).drop(columns="trace_id"),
            "collectives (bus bandwidth as nccl-tests defines it)",
        ),
    ]
