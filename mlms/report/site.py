"""A static results site of one sweep (``mlms site``): what a reader opens without running
anything.

    index.html          every model of the sweep (a row per framework, precision and
                        hardware): its throughput-vs-batch curve, peak
                        throughput and the batch it peaks at, latency at batch 1, energy per
                        inference where the records have it; filterable by task
    models/<name>.html  one page a model: its evaluations' report (``build_report``)
    plotly.min.js       the one copy of plotly.js every page loads (from the plotly wheel)

Nothing is fetched from the network: every page loads the shared plotly.js by relative path.
The model pages are written by one or more processes, each over a share of the models: it reads
its share's span archives once into one in-memory table (``site_spans``) and each page narrows
it to its own evaluations with a query, instead of reading and deriving its archives again (a
sweep's records are model-level runs: a few dozen spans each).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import plotly.graph_objects as go
import plotly.offline

from mlms import __version__
from mlms.analysis.engine import Spans
from mlms.evaluation.record import EvaluationRecord
from mlms.evaluation.sweep import SweepState
from mlms.report import build_report
from mlms.report.html import Section, absent, escape, figure, page, question
from mlms.tracer.archive import read_parquet

PLOTLY = "plotly.min.js"


@dataclass(frozen=True)
class ModelRow:
    """One model on one framework, precision and hardware: its sweep cells' numbers."""

    model: str
    task: str
    framework: str
    precision: str
    hw: str
    #: (batch size, inputs per second, p50 ms, joules per inference or None), by batch size.
    points: list[tuple[int, float, float, float | None]]
    failed: list[str]

    @property
    def peak(self) -> tuple[int, float] | None:
        if not self.points:
            return None
        batch, throughput, _, _ = max(self.points, key=lambda p: p[1])
        return batch, throughput

    @property
    def latency_at_1(self) -> float | None:
        return next((p50 for batch, _, p50, _ in self.points if batch == 1), None)

    @property
    def joules_at_peak(self) -> float | None:
        peak = self.peak
        if peak is None:
            return None
        return next(j for batch, _, _, j in self.points if batch == peak[0])


def model_rows(sweep: SweepState, tasks: dict[str, str]) -> list[ModelRow]:
    """The sweep's cells grouped by model, framework, precision and hardware, in the sweep's
    order."""
    groups: dict[tuple[str, str, str, str], ModelRow] = {}
    for cell in sweep.cells:
        task = tasks.get(cell.model, "")
        row = groups.setdefault(
            cell.group_key,
            ModelRow(cell.model, task, cell.framework, cell.precision, cell.hw, [], []),
        )
        if cell.state == "completed" and cell.throughput is not None:
            row.points.append(
                (
                    cell.batch_size,
                    cell.throughput,
                    cell.p50_ms or math.nan,
                    cell.joules_per_inference,
                )
            )
        elif cell.state == "failed":
            row.failed.append(f"batch {cell.batch_size}: {cell.error or 'failed'}")
    for row in groups.values():
        row.points.sort()
    return list(groups.values())


def write_site(
    sweep: SweepState,
    records: Sequence[EvaluationRecord],
    tasks: dict[str, str],
    archives: Mapping[str, Path],
    folder: Path,
    workers: int = 1,
) -> list[Path]:
    """The site of ``sweep`` in ``folder`` (made if missing): the files written. ``records``
    are its completed evaluations; ``tasks`` maps each model to its task; ``archives`` each
    record's trace id to its span archive. ``workers`` processes write the model pages, each
    a share of the models (a page is a tenth of a second or two of DuckDB and plotly, all CPU)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models").mkdir(exist_ok=True)
    written = [folder / PLOTLY, folder / "index.html"]
    written[0].write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
    rows = model_rows(sweep, tasks)
    # The index first: a site cut short by a time limit still lists every model.
    written[1].write_text(index_page(sweep, rows), encoding="utf-8")
    models = list(dict.fromkeys(row.model for row in rows))
    shares = [models[i::workers] for i in range(workers) if models[i::workers]]
    if len(shares) < 2:
        return [*written, *_write_pages(sweep, records, rows, archives, folder, models)]
    with ProcessPoolExecutor(len(shares)) as pool:
        futures = [
            pool.submit(
                _write_pages,
                sweep,
                [r for r in records if r.model.name in share],
                rows,
                archives,
                folder,
                share,
            )
            for share in shares
        ]
        return [*written, *(path for future in futures for path in future.result())]


def _write_pages(
    sweep: SweepState,
    records: Sequence[EvaluationRecord],
    rows: Sequence[ModelRow],
    archives: Mapping[str, Path],
    folder: Path,
    models: Sequence[str],
) -> list[Path]:
    """The pages of ``models``, over one table of their records' archives (``site_spans``)."""
    spans = site_spans(archives[r.trace_id] for r in records if r.trace_id)
    written = []
    for model in models:
        own = [r for r in records if r.model.name == model]
        path = folder / "models" / f"{model}.html"
        if own:
            text = build_report(own, spans, plotly_src=f"../{PLOTLY}")
        else:
            failed = [f for row in rows if row.model == model for f in row.failed]
            section = Section("No completed evaluation", "none").add(
                absent("; ".join(failed) or "the sweep did not reach this model")
            )
            text = page(model, f"sweep {sweep.id}", [section], plotly_src=f"../{PLOTLY}")
        path.write_text(_with_home_link(text), encoding="utf-8")
        written.append(path)
    return written


def site_spans(archives: Iterable[Path]) -> Spans:
    """The span archives of a site's records as one table in memory: a page's queries narrow
    it to its records' traces, where over a view of the files each would read every archive."""
    return Spans.from_tables(read_parquet(path) for path in archives)


def _with_home_link(text: str) -> str:
    return text.replace(
        '<div class="brand">mlms report</div>',
        '<div class="brand"><a href="../index.html">&larr; all models</a></div>',
        1,
    )


def index_page(sweep: SweepState, rows: Sequence[ModelRow]) -> str:
    tasks = sorted({row.task for row in rows})
    options = "".join(f'<option value="{escape(t)}">{escape(t)}</option>' for t in tasks)
    chooser = (
        '<p><label>Task: <select id="task"><option value="">every task</option>'
        f'{options}</select></label> <span id="shown"></span></p>'
    )
    body = "".join(_row_html(row) for row in rows)
    head = "".join(
        f"<th{' class=num' if numeric else ''}>{escape(title)}</th>"
        for title, numeric in (
            ("model", False), ("task", False), ("framework", False), ("precision", False),
            ("hardware", False),
            ("throughput vs batch size", False), ("peak (inputs/s)", True),
            ("at batch", True), ("p50 at batch 1 (ms)", True),
            ("energy at peak (J/inference)", True), ("failed cells", False),
        )
    )  # fmt: skip
    overview = Section("Models", "models").add(
        question(
            "How fast is each model, at which batch size does it saturate, and what does "
            "one inference cost in energy?"
        ),
        chooser,
        figure(_curves(rows), "curves"),
        f'<div class="scroll"><table class="data" id="index"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>",
        f"<script>{_FILTER}</script>",
    )
    hardware = ", ".join(sorted({row.hw for row in rows}))
    done = sum(cell.state == "completed" for cell in sweep.cells)
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    subtitle = (
        f"sweep {sweep.id} on {hardware}: {done} of {len(sweep.cells)} cells completed; "
        f"mlms {__version__}, made {made}"
    )
    text = page("mlms results", subtitle, [overview], plotly_src=PLOTLY)
    return text.replace(
        '<div class="brand">mlms report</div>', '<div class="brand">mlms results</div>', 1
    )


def _curves(rows: Sequence[ModelRow]) -> go.Figure:
    fig = go.Figure()
    for row in rows:
        if not row.points:
            continue
        fig.add_scatter(
            x=[p[0] for p in row.points],
            y=[p[1] for p in row.points],
            mode="lines+markers",
            name=f"{row.model} ({row.framework}, {row.precision}, {row.hw})",
            meta=row.task,
            hovertemplate="batch %{x}: %{y:.1f} inputs/s<extra>%{fullData.name}</extra>",
        )
    fig.update_layout(
        height=460,
        margin={"l": 60, "r": 10, "t": 30, "b": 50},
        xaxis={"title": "batch size", "type": "log", "dtick": math.log10(2)},
        yaxis={"title": "inputs per second", "type": "log"},
        legend={"font": {"size": 10}},
    )
    return fig


def _row_html(row: ModelRow) -> str:
    peak = row.peak
    link = f'<a href="models/{escape(row.model)}.html">{escape(row.model)}</a>'
    cells = [
        f"<td>{link}</td>",
        f"<td>{escape(row.task)}</td>",
        f"<td>{escape(row.framework)}</td>",
        f"<td>{escape(row.precision)}</td>",
        f"<td>{escape(row.hw)}</td>",
        f"<td>{_sparkline(row.points)}</td>",
        _number(peak[1] if peak else None, "{:,.1f}"),
        _number(peak[0] if peak else None, "{:d}"),
        _number(row.latency_at_1, "{:.3f}"),
        _number(row.joules_at_peak, "{:.4g}"),
        f'<td class="wrap">{escape("; ".join(row.failed))}</td>',
    ]
    return f'<tr data-task="{escape(row.task)}">{"".join(cells)}</tr>'


def _number(value: float | None, form: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "<td></td>"
    return f'<td class="num">{form.format(value)}</td>'


def _sparkline(points: Sequence[tuple[int, float, float, float | None]]) -> str:
    """Throughput against log2 batch size, drawn as an inline SVG (no script per row)."""
    if not points:
        return ""
    width, height = 120, 28
    xs = [math.log2(p[0]) for p in points]
    ys = [p[1] for p in points]
    span_x = (max(xs) - min(xs)) or 1.0
    top = max(ys) or 1.0
    coords = " ".join(
        f"{2 + (x - min(xs)) / span_x * (width - 4):.1f},{height - 2 - y / top * (height - 4):.1f}"
        for x, y in zip(xs, ys, strict=True)
    )
    title = escape(", ".join(f"{p[0]}: {p[1]:,.1f}/s" for p in points))
    return (
        f'<svg width="{width}" height="{height}" role="img"><title>{title}</title>'
        f'<polyline points="{coords}" fill="none" stroke="#2f6fde" stroke-width="1.5"/></svg>'
    )


#: The task chooser: hides other tasks' rows and curves.
_FILTER = (
    "const chooser = document.getElementById('task');"
    "function show() {"
    " const task = chooser.value; let shown = 0;"
    " document.querySelectorAll('#index tbody tr').forEach((row) => {"
    "  const on = !task || row.dataset.task === task; row.hidden = !on; shown += on; });"
    " document.getElementById('shown').textContent = shown + ' shown';"
    " const plot = document.getElementById('curves');"
    " if (plot && plot.data) Plotly.restyle(plot, {visible: plot.data.map("
    "  (trace) => !task || trace.meta === task)}); }"
    "chooser.addEventListener('change', show); show();"
)
