"""The page: escaping, tables, embedded figures, sections with a table of contents.

Everything the page needs is inside it: plotly.js is inlined once from the installed plotly
wheel and each figure is a div with its data, so the file opens offline and fetches nothing.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.offline

#: Display names for the analyses' key columns (the others already name their unit).
HEADERS = {
    "batch_size": "batch size",
    "layer_index": "layer #",
    "trace_id": "trace",
    "gflop": "GFLOP",
    "params": "params (count)",
    "calls": "calls per predict",
    "launches": "launches (count)",
    "kernels": "kernels (count)",
    "layers": "layers (count)",
    "executions": "executions (count)",
    "inputs": "inputs (count)",
    "spans": "spans (count)",
}

_CONFIG = {"displaylogo": False, "responsive": True}

_CSS = """
:root { --ink: #1f2933; --muted: #616e7c; --line: #d9e2ec; --band: #f5f7fa; --accent: #2f6fde; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--ink); background: #fff; }
nav { position: fixed; top: 0; left: 0; bottom: 0; width: 250px; overflow-y: auto;
      padding: 18px 14px; background: var(--band); border-right: 1px solid var(--line); }
nav .brand { font-weight: 700; font-size: 16px; margin-bottom: 10px; }
nav ol { list-style: none; padding-left: 0; margin: 0; }
nav ol ol { padding-left: 12px; }
nav a { display: block; padding: 2px 0; color: var(--ink); text-decoration: none;
        font-size: 13px; }
nav a:hover { color: var(--accent); }
nav > ol > li > a { font-weight: 600; margin-top: 8px; font-size: 14px; }
main { margin-left: 250px; padding: 22px 32px 60px; max-width: 1500px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 34px 0 6px; padding-bottom: 4px;
     border-bottom: 2px solid var(--line); }
h3 { font-size: 16px; margin: 24px 0 6px; }
h4 { font-size: 14px; margin: 18px 0 4px; color: var(--muted); }
p.question { color: var(--muted); margin: 0 0 8px; }
p.absent { color: var(--muted); font-style: italic; margin: 4px 0 10px; }
p.note { color: #8a4b08; background: #fff7e6; padding: 4px 8px; border-radius: 4px; }
.subtitle { color: var(--muted); margin-bottom: 16px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 12px; }
.plot { border: 1px solid var(--line); border-radius: 6px; padding: 4px; min-width: 0; }
.scroll { overflow-x: auto; max-width: 100%; }
table.data { border-collapse: collapse; margin: 6px 0 14px; font-size: 13px; }
table.data caption { text-align: left; font-weight: 600; padding: 4px 0; }
table.data th, table.data td { padding: 3px 9px; border-bottom: 1px solid var(--line);
                               white-space: nowrap; }
table.data th { background: var(--band); text-align: left; white-space: normal;
                vertical-align: bottom; }
table.data td.num, table.data th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.data tbody tr:hover { background: #eef4ff; }
table.data td.wrap { white-space: normal; min-width: 220px; }
#evaluations td:first-child { font-weight: 600; color: var(--muted); }
details { margin: 6px 0 14px; }
summary { cursor: pointer; color: var(--accent); }
code { font-size: 12px; background: var(--band); padding: 1px 4px; border-radius: 3px; }
"""


@dataclass
class Section:
    """A titled part of the page: its blocks (HTML) and its subsections."""

    title: str
    anchor: str
    nav: str = ""  # a shorter title for the table of contents
    blocks: list[str] = field(default_factory=list)
    children: list[Section] = field(default_factory=list)

    def add(self, *blocks: str) -> Section:
        self.blocks.extend(blocks)
        return self

    def child(self, title: str, anchor: str, nav: str = "") -> Section:
        section = Section(title, anchor, nav)
        self.children.append(section)
        return section


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def question(text: str) -> str:
    """The question a section or plot answers, shown under its title."""
    return f'<p class="question">{escape(text)}</p>'


def absent(reason: str) -> str:
    """One line in place of a plot or table whose data does not exist, saying why."""
    return f'<p class="absent">{escape(reason)}</p>'


def note(text: str) -> str:
    """A warning the reader should not miss (a spread too wide to trust, dropped records)."""
    return f'<p class="note">{escape(text)}</p>'


def heading(text: str) -> str:
    return f"<h4>{escape(text)}</h4>"


def table(
    frame: pd.DataFrame,
    caption: str | None = None,
    *,
    table_id: str | None = None,
    wrap: Collection[str] = (),
) -> str:
    """``frame`` as an HTML table: escaped cells, numbers right-aligned and rounded for reading,
    each rounded number's full value in its ``title`` (shown on hover); the text of the ``wrap``
    columns may break over lines."""
    numeric = [_numeric(frame[c]) for c in frame.columns]
    head = "".join(
        f"<th{' class=num' if num else ''}>{escape(HEADERS.get(str(c), c))}</th>"
        for c, num in zip(frame.columns, numeric, strict=True)
    )
    wrapped = [str(c) in wrap for c in frame.columns]
    rows = "".join(
        "<tr>" + "".join(_cell(v, w) for v, w in zip(row, wrapped, strict=True)) + "</tr>"
        for row in frame.itertuples(index=False, name=None)
    )
    ident = f' id="{escape(table_id)}"' if table_id else ""
    title = f"<caption>{escape(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table class="data"{ident}>{title}'
        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"
    )


def collapsed(summary: str, body: str) -> str:
    """``body`` behind a disclosure line (long tables)."""
    return f"<details><summary>{escape(summary)}</summary>{body}</details>"


#: Each plot draws as the parser reaches it, sized to its grid cell at that moment (a cell that
#: narrows when the plots after it arrive); once the page is laid out, fit every plot again.
_RESIZE = (
    'window.addEventListener("load", () => document.querySelectorAll(".js-plotly-plot")'
    ".forEach((plot) => Plotly.Plots.resize(plot)));"
)


def figure(fig: go.Figure, div_id: str) -> str:
    """A plotly figure as a div that draws itself with the page's inlined plotly.js."""
    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG)
    return f'<div class="plot">{body}</div>'


def grid(blocks: Sequence[str]) -> str:
    """Blocks side by side where the window is wide enough."""
    return f'<div class="grid">{"".join(blocks)}</div>'


def page(
    title: str, subtitle: str, sections: Sequence[Section], plotly_src: str | None = None
) -> str:
    """The whole document: plotly.js (inlined, or loaded from the relative URL ``plotly_src``
    that pages of one site share), styles, the table of contents and the sections."""
    script = (
        f'<script type="text/javascript" src="{escape(plotly_src)}"></script>'
        if plotly_src
        else f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>'
    )
    toc = "".join(_toc_entry(s) for s in sections)
    body = "".join(_render(s, 2) for s in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style>"
        f"{script}</head><body>"
        f'<nav><div class="brand">mlms report</div><ol>{toc}</ol></nav>'
        f'<main><h1>{escape(title)}</h1><div class="subtitle">{escape(subtitle)}</div>'
        f"{body}</main><script>{_RESIZE}</script></body></html>\n"
    )


def _toc_entry(section: Section) -> str:
    children = "".join(_toc_entry(c) for c in section.children)
    nested = f"<ol>{children}</ol>" if children else ""
    title = escape(section.nav or section.title)
    return f'<li><a href="#{escape(section.anchor)}">{title}</a>{nested}</li>'


def _render(section: Section, depth: int) -> str:
    tag = f"h{min(depth, 4)}"
    inner = "".join(section.blocks) + "".join(_render(c, depth + 1) for c in section.children)
    return (
        f'<section id="{escape(section.anchor)}"><{tag}>{escape(section.title)}</{tag}>'
        f"{inner}</section>"
    )


def _numeric(column: pd.Series) -> bool:
    """Numbers, also where they come as Python objects (DuckDB's exact sums are Decimals)."""
    values = column.dropna()
    if pd.api.types.is_bool_dtype(column):
        return False
    return pd.api.types.is_numeric_dtype(column) or (
        not values.empty and all(isinstance(v, numbers.Number) for v in values)
    )


def _cell(value: object, wrap: bool) -> str:
    if isinstance(value, Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
    if value is None or value is pd.NA:
        return "<td></td>"
    if isinstance(value, bool | np.bool_):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, numbers.Integral):
        return f'<td class="num">{int(value):,}</td>'
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isnan(number):
            return "<td></td>"
        return f'<td class="num" title="{number!r}">{_rounded(number)}</td>'
    return f"<td{' class=wrap' if wrap else ''}>{escape(value)}</td>"


def _rounded(value: float) -> str:
    """Four significant digits, without exponents for the sizes a table shows."""
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 1 or magnitude == 0:
        return f"{value:.{3 - int(math.log10(magnitude or 1))}f}"
    if magnitude >= 1e-4:
        return f"{value:.{3 - math.floor(math.log10(magnitude))}f}"
    return f"{value:.3g}"
