"""The report's advice section: each stored advice (``mlms advise``) one of whose verifying
evaluations is in the report: what was asked, the space and what was left out, every
configuration's prediction with its interval beside what the verified ones achieved."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import plotly.graph_objects as go

from mlms.advise.record import AdviceRecord
from mlms.advise.tables import advice_table, facts
from mlms.evaluation.record import EvaluationRecord
from mlms.report.html import Section, figure, heading, question, table

TOP = 20  # configurations shown (every verified one besides)


def advice_for(
    records: Sequence[EvaluationRecord], advice: Iterable[AdviceRecord]
) -> list[AdviceRecord]:
    """The ``advice`` that verified one of ``records``."""
    ids = {record.id for record in records}
    return [a for a in advice if any(row.evaluation_id in ids for row in a.rows)]


def advice_section(advice: Sequence[AdviceRecord]) -> Section:
    """Which configuration should run, and how well was it predicted? One part per advice."""
    section = Section("Advice", "advice")
    section.add(
        question(
            "Which configuration of the model should run here, and how well did the prediction "
            "(stored evaluations, the lower bound's what-ifs, short probes) match what the "
            "verifying evaluations achieved?"
        )
    )
    for index, record in enumerate(advice):
        part = section.child(
            f"{record.model} on {record.device_name}, {record.request.objective} "
            f"(advice {record.id[:8]})",
            f"advice-{index}",
            f"{record.model} · {record.request.objective} · advice {record.id[:8]}",
        )
        part.add(table(facts(record), wrap={"value"}))
        part.add(heading("Predicted against achieved"))
        part.add(figure(_predicted_vs_achieved(record), f"advice-figure-{index}"))
        part.add(
            table(
                advice_table(record, TOP),
                f"the best {TOP} predicted configurations and every verified one",
                table_id=f"advice-table-{index}",
                wrap={"configuration", "accuracy"},
            )
        )
    return section


def _predicted_vs_achieved(record: AdviceRecord) -> go.Figure:
    rows = record.rows[:TOP]
    labels = [row.config.label() for row in rows]
    unit = record.request.unit
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[row.predicted for row in rows],
            y=labels,
            mode="markers",
            name="predicted (95% interval)",
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [row.high - row.predicted for row in rows],
                "arrayminus": [row.predicted - row.low for row in rows],
            },
        )
    )
    verified = [row for row in rows if row.achieved is not None]
    fig.add_trace(
        go.Scatter(
            x=[row.achieved for row in verified],
            y=[row.config.label() for row in verified],
            mode="markers",
            marker={"symbol": "x", "size": 11},
            name="achieved",
        )
    )
    fig.update_layout(
        xaxis_title=f"{record.request.objective} ({unit})",
        yaxis={"autorange": "reversed"},
        height=120 + 24 * len(rows),
    )
    return fig
