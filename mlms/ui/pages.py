"""Each page's body, from what the client returned. Only HTML here: no client calls."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from mlms.advise.record import AdviceRecord
from mlms.analysis.record_ranks import record_ranks
from mlms.client import Evaluations
from mlms.evaluation.headline import TASKS
from mlms.evaluation.record import EvaluationRecord
from mlms.frameworks import FRAMEWORKS
from mlms.manifest import ModelManifest
from mlms.report.evaluations import hardware, label
from mlms.server.jobs import Job
from mlms.tracer.levels import TraceLevel
from mlms.ui.fleet import Machine
from mlms.ui.html import e, link, message, number, table
from mlms.ui.runs import Run
from mlms.ui.search import Filters

#: Rows a page of the evaluations table shows; the next page is a link.
SHOWN = 200
LIVE_FLEET_MS = 2000
LIVE_RUN_MS = 500


def fleet(embedded: bool, live: str) -> str:
    where = (
        "Embedded: evaluations run in this process (start mlms ui with --server for a fleet)."
        if embedded
        else "The agents registered with the server, refreshed every two seconds."
    )
    return (
        f'<p class="muted">{e(where)}</p>'
        f'<div id="fleet" data-live="/fleet/live" data-every="{LIVE_FLEET_MS}">{live}</div>'
    )


def fleet_live(machines: Sequence[Machine], jobs: Sequence[Job], runs: Sequence[Run]) -> str:
    rows = [
        [
            m.id,
            m.address,
            m.framework,
            m.hardware,
            m.cpu,
            m.gpus,
            "all" if m.models is None else str(m.models),
            str(m.load),
            m.since,
        ]
        for m in machines
    ]
    headers = ["agent", "address", "framework", "hardware", "cpu", "gpus", "models",
               "load (evaluations)", "up since (UTC)"]  # fmt: skip
    parts = [
        table(headers, rows, table_id="machines")
        if rows
        else message("no live agents are registered with the server", "muted")
    ]
    if jobs:
        parts.append("<h2>In flight on the fleet</h2>")
        parts.append(
            table(
                ["evaluation", "model", "state", "agent", "attempt", "since (UTC)"],
                (_job_row(j) for j in jobs),
                table_id="jobs",
            )
        )
    if runs:
        parts.append("<h2>Started from this page</h2>")
        parts.append(
            table(
                ["run", "model", "status"],
                ([link(f"/runs/{r.id}", r.id), e(r.request.model), e(r.describe())] for r in runs),
                table_id="runs",
                raw=True,
            )
        )
    return "".join(parts)


def _job_row(job: Job) -> list[str]:
    return [job.evaluation_id[:12], job.model, job.state, job.agent_id or "", str(job.attempt),
            job.started_at.strftime("%H:%M:%S")]  # fmt: skip


def zoo(models: Sequence[ModelManifest]) -> str:
    rows = []
    for m in models:
        frameworks = ", ".join(f"{f.name} {f.version}".strip() for f in m.frameworks)
        assets = "; ".join(
            f"built by {s.builder} (seed {s.seed})" if s.kind == "build"
            else f"{s.format} for {s.framework} (sha256 {s.sha256[:12]}…)" if s.kind == "file"
            else f"{s.framework}: {s.filename} (sha256 {s.sha256[:12]}…)"
            for s in m.sources
        )  # fmt: skip
        rows.append(
            [
                link("/evaluations", m.name, model=m.name),
                e(m.version),
                e(m.origin),
                e(m.task),
                e(frameworks),
                e("x".join(map(str, m.inputs[0].shape)) + f" {m.inputs[0].dtype}"),
                e(m.dataset.name if m.dataset else ""),
                e(assets),
                link("/run", "run", model=m.name),
            ]
        )
    headers = ["model", "version", "origin", "task", "frameworks", "input", "data set", "assets",
               ""]  # fmt: skip
    return table(headers, rows, table_id="models", raw=True)


def evaluations(listing: Evaluations, filters: Filters, models: Sequence[str]) -> str:
    def option(value: str, chosen: str) -> str:
        selected = " selected" if value == chosen else ""
        return f'<option value="{e(value)}"{selected}>{e(value or "any")}</option>'

    search = f"""<form method="get" action="/evaluations" class="search" id="search">
<label>search <input type="search" name="q" value="{e(filters.text)}"
 placeholder="id, model, framework, device…"></label>
<label>model <select name="model">{"".join(option(m, filters.model) for m in ["", *models])}
</select></label>
<label>framework <select name="framework">
{"".join(option(f, filters.framework) for f in ["", *FRAMEWORKS])}</select></label>
<label>task <select name="task">{"".join(option(t, filters.task) for t in ["", *TASKS])}
</select></label>
<label>hardware <input name="hardware" value="{e(filters.hardware)}" placeholder="cpu, h100…">
</label>
<label>from <input type="date" name="since" value="{e(filters.since or "")}"></label>
<label>to <input type="date" name="until" value="{e(filters.until or "")}"></label>
<button>search</button> {link("/evaluations", "clear")}</form>"""
    shown = listing.summaries
    count = f"{listing.total} evaluations match" + (
        f", {len(shown)} on this page" if listing.total > len(shown) else ""
    )
    rows = [
        [
            f'<input type="checkbox" name="id" value="{e(s.id)}" aria-label="compare {s.id[:8]}">',
            link(f"/evaluations/{s.id}", s.id[:12]),
            e(s.created_at.strftime("%Y-%m-%d %H:%M:%S")),
            e(s.model),
            e(f"{s.framework} {s.framework_version}"),
            e(s.hardware_label),
            e(s.trace_level),
            e(s.options),
            e(",".join(map(str, s.batch_sizes))),
            number(s.p50_ms),
            number(s.throughput, 1),
            e(s.accuracy_line),
            e(s.status),
        ]
        for s in shown
    ]
    headers = ["", "evaluation", "created (UTC)", "model", "framework", "hardware",
               "trace level", "options", "batch sizes", "p50 first bs (ms)", "inputs/s",
               "accuracy", "status"]  # fmt: skip
    listed = (
        table(headers, rows, table_id="evaluations", raw=True)
        if rows
        else message("no evaluation matches; start one under Run", "muted")
    )
    following = (
        '<p class="pages">'
        + link(
            "/evaluations", "next page", **filters.parameters(page_token=listing.next_page_token)
        )
        + "</p>"
        if listing.next_page_token
        else ""
    )
    in_flight = (
        f'<p class="muted">{len(listing.in_flight)} in flight on the fleet (see Fleet)</p>'
        if listing.in_flight
        else ""
    )
    return f"""{search}{in_flight}<p class="muted" id="count">{e(count)}</p>
<form method="get" action="/compare" id="compare-form">
<button id="compare">compare selected</button>{listed}</form>{following}"""


def _results(records: Sequence[EvaluationRecord]) -> str:
    rows = [
        [
            r.id[:8],
            f"{r.model.name} / {r.framework.name} {r.framework.version} / {r.device}",
            str(b.batch_size),
            number(b.latency_ms.p50),
            number(b.latency_ms.p99),
            number(b.throughput, 1),
            b.latency_ms.warning or "",
        ]
        for r in records
        for b in r.results
    ]
    headers = ["evaluation", "what", "batch size", "p50 (ms)", "p99 (ms)", "inputs/s", "warning"]
    return table(headers, rows, table_id="results")


def evaluation(record: EvaluationRecord, jaeger_url: str | None) -> str:
    facts = [
        ["model", f"{record.model.name} {record.model.version}"],
        ["framework", f"{record.framework.name} {record.framework.version}"],
        ["device", f"{record.device}: {hardware(record)}"],
        ["created (UTC)", record.created_at.strftime("%Y-%m-%d %H:%M:%S")],
        ["trace level", record.trace_level],
        ["status", record.status],
        ["trace", record.trace_id or "none (not traced)"],
    ]
    ranks = record_ranks(record)
    if ranks > 1:
        facts.append(["ranks", f"{ranks} (per-rank analyses in the report's Ranks section)"])
    links = []
    if record.trace_id:
        links.append(
            f'<a href="/api/evaluations/{e(record.id)}/trace.json" download id="chrome-trace">'
            "Chrome trace (open in ui.perfetto.dev)</a>"
        )
        if jaeger_url:
            href = f"{jaeger_url.rstrip('/')}/trace/{quote(record.trace_id)}"
            links.append(f'<a href="{e(href)}" id="jaeger" rel="noopener">trace in Jaeger</a>')
    links.append(f'<a href="/api/evaluations/{e(record.id)}">record (JSON)</a>')
    links.append(f'<a href="/evaluations/{e(record.id)}/report" target="_blank">report alone</a>')
    if ranks > 1 and record.trace_id:
        links.append(
            f'<a href="/evaluations/{e(record.id)}/report#ranks" target="_blank" id="ranks">'
            "per-rank breakdown, overlap, skew, collectives</a>"
        )
    return (
        table(["", ""], facts, table_id="facts")
        + f'<p class="links">{" · ".join(links)}</p>'
        + _results([record])
        + _report_frame(f"/evaluations/{quote(record.id)}/report", label(record))
    )


def compare(records: Sequence[EvaluationRecord]) -> str:
    ids = "&".join(f"id={quote(r.id)}" for r in records)
    return (
        '<p class="muted">Each evaluation\'s numbers, then the report of all of them: each '
        "one's levels, and how they differ.</p>"
        + _results(records)
        + _report_frame(f"/compare/report?{ids}", f"{len(records)} evaluations compared")
    )


def advice_list(advice: Sequence[AdviceRecord]) -> str:
    if not advice:
        return '<p class="muted">No advice stored yet: <code>mlms advise --model M</code>.</p>'
    rows = [
        [
            link(f"/advice/{quote(a.id)}", a.id[:8]),
            e(a.created_at.strftime("%Y-%m-%d %H:%M")),
            e(a.model),
            e(a.device_name),
            e(a.request.objective),
            e(a.recommendation.config.label() if a.recommendation else "none"),
            e(number(a.recommendation.achieved if a.recommendation else None, 4)),
            e(a.request.unit),
        ]
        for a in reversed(advice)
    ]
    headers = ["advice", "created (UTC)", "model", "device", "objective", "recommended",
               "achieved", "unit"]  # fmt: skip
    return table(headers, rows, table_id="advice", raw=True)


def advice(record: AdviceRecord) -> str:
    """The advice's facts and every configuration, then the report of its verified ones."""
    from mlms.advise.tables import advice_table, facts

    about = facts(record)
    configurations = advice_table(record)
    body = table(["", ""], about.astype(str).values.tolist(), table_id="facts") + table(
        list(configurations.columns),
        [[_text(v) for v in row] for row in configurations.itertuples(index=False)],
        table_id="configurations",
    )
    if any(row.evaluation_id for row in record.rows):
        body += _report_frame(f"/advice/{quote(record.id)}/report", f"advice {record.id[:8]}")
    return body


def _text(value: object) -> str:
    if isinstance(value, float):
        return "" if value != value else f"{value:,.4g}"  # NaN: not measured
    return "" if value is None else str(value)


def _report_frame(src: str, title: str) -> str:
    return f'<iframe class="report" id="report" src="{e(src)}" title="{e(title)}"></iframe>'


def run_form(models: Sequence[ModelManifest], values: dict[str, str], error: str = "") -> str:
    def value(name: str, default: str) -> str:
        return e(values.get(name, default))

    chosen = values.get("model", "")
    model_options = "".join(
        f'<option value="{e(m.name)}"{" selected" if m.name == chosen else ""}>{e(m.name)} '
        f"({e(', '.join(m.framework_names))})</option>"
        for m in models
    )
    framework = values.get("framework", "")
    framework_options = "".join(
        f'<option value="{e(f)}"{" selected" if f == framework else ""}>'
        f"{e(f or 'first installed')}</option>"
        for f in ["", *FRAMEWORKS]
    )
    level = values.get("trace_level", "model")
    level_options = "".join(
        f"<option{' selected' if t.label == level else ''}>{t.label}</option>" for t in TraceLevel
    )
    return f"""{message(error) if error else ""}
<form method="post" action="/run" class="run" id="run-form">
<label>model <select name="model" id="model" required>{model_options}</select></label>
<label>framework <select name="framework" id="framework">{framework_options}</select></label>
<label>hardware <input name="hw" id="hw" value="{value("hw", "cpu")}" required
 placeholder="cpu, v100, a100, h100…"></label>
<label>batch sizes <input name="batch_sizes" id="batch_sizes" value="{value("batch_sizes", "1")}"
 required placeholder="1,8,32"></label>
<label>trace level <select name="trace_level" id="trace_level">{level_options}</select></label>
<label>iterations <input name="iterations" id="iterations" value="{value("iterations", "20")}"
 inputmode="numeric"></label>
<label>warm-up <input name="warmup" id="warmup" value="{value("warmup", "3")}"
 inputmode="numeric"></label>
<label>at least (s) <input name="min_seconds" id="min_seconds"
 value="{value("min_seconds", "1")}" inputmode="decimal"></label>
<button id="start">start</button></form>"""


def run(run: Run) -> str:
    r = run.request
    what = (
        f"{r.model} on {r.framework or 'the first installed framework'}, {r.hw}, batch sizes "
        f"{','.join(map(str, r.batch_sizes))}, trace level {r.trace_level.label}"
    )
    return (
        f'<p class="muted">{e(what)}</p>'
        f'<div id="progress" data-live="/runs/{e(run.id)}/live" data-every="{LIVE_RUN_MS}">'
        f"{run_live(run)}</div>"
    )


def run_live(run: Run) -> str:
    done = ' data-done="1"' if run.done else ""
    bar = ""
    if run.progress is not None and not run.done:
        p = run.progress
        bar = f'<progress max="{p.target}" value="{p.done}"></progress>'
    opened = (
        " " + link(f"/evaluations/{run.evaluation_id}", "open the evaluation")
        if run.evaluation_id
        else ""
    )
    return (
        f'<p class="state state-{e(run.state)}" id="state"{done}>{e(run.describe())}{opened}</p>'
        + bar
    )


def login(next_path: str, error: str = "") -> str:
    return f"""{message(error) if error else ""}
<p>The server needs a token. It stays with this page's server, in your session only.</p>
<form method="post" action="/login" class="login" id="login-form">
<input type="hidden" name="next" value="{e(next_path)}">
<label>token <input type="password" name="token" id="token" autocomplete="off" required
 placeholder="mlms_…"></label>
<button id="sign-in">log in</button></form>"""
