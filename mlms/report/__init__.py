"""The self-contained HTML report of one or more evaluations (``mlms report``).

``build_report`` lays out what the analyses of ``mlms.analysis`` return, level by level
(model, layer, kernel, one predict's timeline, across evaluations), as tables and plotly
figures in one file that needs no network: plotly.js is inlined once.

    html.py         the page: escaping, tables, figure divs, sections and table of contents
    figures.py      one plotly figure per analysis table, drawing only
    evaluations.py  the header: what was evaluated, where, when, with which settings
    levels.py       each evaluation's part of the model, layer, kernel and timeline sections
    across.py       the comparison section
    bounds.py       the lower bounds (``mlms bound``) measured against the evaluations
    advice.py       the advice (``mlms advise``) that verified the evaluations
    ranks.py        several ranks: per-rank breakdown, overlap, skew, collectives; scaling
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from mlms import __version__
from mlms.advise.record import AdviceRecord
from mlms.analysis.engine import Spans
from mlms.bounds.record import BoundRecord
from mlms.evaluation.record import EvaluationRecord
from mlms.report.across import across_section
from mlms.report.advice import advice_for, advice_section
from mlms.report.bounds import bounds_for, bounds_section
from mlms.report.evaluations import evaluations_section, label, short_label
from mlms.report.html import Section, page, question
from mlms.report.levels import LEVELS, parts_spans
from mlms.report.ranks import ranks_section

__all__ = ["advice_for", "bounds_for", "build_report"]


def build_report(
    records: Sequence[EvaluationRecord],
    spans: Spans,
    bounds: Sequence[BoundRecord] = (),
    advice: Sequence[AdviceRecord] = (),
    plotly_src: str | None = None,
) -> str:
    """The report of ``records`` as one HTML document; ``spans`` holds their traces (a record
    without one gets its trace-based sections replaced by a line saying so). Each of ``bounds``
    measured against one of ``records`` (``bounds_for``) gets its part of a lower-bound section;
    with none, the page has no such section. So does each of ``advice`` that verified one of
    ``records`` (``advice_for``). ``plotly_src``: load plotly.js from this relative URL instead
    of inlining it (pages of one site share one copy)."""
    levels = [Section(level.title, level.anchor).add(question(level.question)) for level in LEVELS]
    for index, (record, own) in enumerate(zip(records, parts_spans(spans, records), strict=True)):
        for level, section in zip(LEVELS, levels, strict=True):
            part = section.child(label(record), f"{level.anchor}-{index}", short_label(record))
            part.add(*level.part(record, own, index))
    sections = [evaluations_section(records), *levels]
    if ranks := ranks_section(records, spans):
        sections.append(ranks)
    if shown := bounds_for(records, bounds):
        sections.append(bounds_section(records, shown))
    if advised := advice_for(records, advice):
        sections.append(advice_section(advised))
    sections.append(across_section(records, spans))
    title = label(records[0]) if len(records) == 1 else f"{len(records)} evaluations compared"
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return page(title, f"mlms {__version__} report, made {made}", sections, plotly_src)
