"""The report's lower-bound section: each stored bound (``mlms bound``) measured against one of
the report's evaluations, as Benanza draws it: the model's latency against its sequential and
parallel lower bounds (LBL), the what-ifs, and the slowest layers against their own bounds.

The tables are ``mlms.bounds.tables``'s; this module only picks the bounds, lays the tables out
and plots them (``mlms.report.figures``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from mlms.bounds.record import BoundRecord
from mlms.bounds.tables import bound_summary, layer_bounds, slowest_layers, what_ifs
from mlms.evaluation.record import EvaluationRecord
from mlms.report import figures
from mlms.report.evaluations import label
from mlms.report.html import Section, absent, collapsed, figure, heading, question, table

TOP = 15  # slowest layers per batch size, against their bounds
#: The columns of the slowest-layers table (the rest are in the collapsed table of all layers).
SLOWEST_COLUMNS = ["batch size", "layer", "kind", "measured (ms)", "framework alone (ms)",
                   "bound (ms)", "measured/bound", "fastest", "critical path"]  # fmt: skip


def bounds_for(
    records: Sequence[EvaluationRecord], bounds: Iterable[BoundRecord]
) -> list[BoundRecord]:
    """The ``bounds`` with a batch measured against one of ``records`` (in the order given:
    ``list_bounds`` gives the oldest first)."""
    ids = {record.id for record in records}
    return [b for b in bounds if any(batch.evaluation_id in ids for batch in b.batches)]


def bounds_section(records: Sequence[EvaluationRecord], bounds: Sequence[BoundRecord]) -> Section:
    """How far is each evaluation from the fastest its layers could run? One part per bound."""
    section = Section("Lower bounds (Benanza)", "bounds")
    section.add(
        question(
            "How far is the measured latency from the fastest the model's layers could run, "
            "and what would each optimisation buy? Sequential LBL: each layer's fastest library "
            "implementation at the framework's precision, summed; parallel LBL: the critical "
            "path through the layer graph weighted by those bounds (LBL/measured of 1 is "
            "optimal). Each what-if is the latency if that one optimisation were made."
        )
    )
    by_id = {record.id: record for record in records}
    for index, bound in enumerate(bounds):
        part = section.child(
            f"{bound.model} on {bound.framework} {bound.framework_version}, "
            f"{bound.device_name} (bound {bound.id[:8]})",
            f"bounds-{index}",
            f"{bound.model} · {bound.framework} · {bound.device} · bound {bound.id[:8]}",
        )
        part.add(*_bound_part(bound, by_id, index))
    return section


def _bound_part(bound: BoundRecord, records: dict[str, EvaluationRecord], index: int) -> list[str]:
    blocks = [_about(bound, records)]
    if not bound.batches:
        return [*blocks, absent("the bound has no batch sizes")]
    summary = bound_summary(bound)
    blocks.append(
        table(summary, "lower bounds against the measurement", table_id=f"bound-summary-{index}")
    )
    blocks.extend(
        figure(figures.lower_bounds(rows, int(batch_size)), f"bound-latency-{index}-bs{batch_size}")
        for batch_size, rows in summary.groupby("batch size", sort=True)
    )
    ifs = what_ifs(bound)
    blocks.append(heading("What if"))
    if ifs.empty:
        blocks.append(absent("no what-ifs in this bound"))
    else:
        blocks.append(table(ifs, "what if", table_id=f"bound-what-ifs-{index}", wrap={"detail"}))
    blocks.append(heading(f"Slowest {TOP} layers against their bounds"))
    slowest = slowest_layers(bound, TOP)
    if slowest.empty:
        return [*blocks, absent("no layers in this bound")]
    blocks.extend(
        figure(
            figures.layers_against_bounds(rows, int(batch_size)),
            f"bound-layers-{index}-bs{batch_size}",
        )
        for batch_size, rows in slowest.groupby("batch size", sort=True)
    )
    every = layer_bounds(bound)
    blocks.append(
        table(
            slowest[SLOWEST_COLUMNS],
            f"slowest {TOP} layers per batch size (by measured time)",
            table_id=f"bound-layers-table-{index}",
        )
    )
    blocks.append(collapsed(f"all {len(every)} layer rows", table(every)))
    return blocks


def _about(bound: BoundRecord, records: dict[str, EvaluationRecord]) -> str:
    """What the bound was measured against, with which libraries, at which precisions."""
    against = dict.fromkeys(batch.evaluation_id for batch in bound.batches)
    facts = {
        "measured against": "; ".join(
            label(records[e]) if e in records else f"evaluation {e} (not in this report)"
            for e in against
        ),
        "libraries": ", ".join(f"{k} {v}" for k, v in bound.libraries.items()),
        "precisions benchmarked": ", ".join(bound.precisions),
        "the framework runs": ", ".join(
            f"{kind} in {p}" for kind, p in bound.framework_precisions.items()
        ),
        "layer configs": f"{bound.benchmarked} benchmarked in {bound.bench_seconds:.1f} s, "
        f"{bound.cached} from the perfdb",
        "date (UTC)": bound.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        "bound id": bound.id,
    }
    frame = pd.DataFrame({"": list(facts), "value": list(facts.values())})
    return table(frame, wrap={"value"})
