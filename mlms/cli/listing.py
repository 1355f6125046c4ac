"""``mlms evals``: what has been evaluated."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import click
from pydantic import ValidationError

from mlms.cli.common_options import client_for, server_option
from mlms.cli.render import out, rows_table
from mlms.errors import InvalidArgument
from mlms.evaluation.headline import TASKS
from mlms.evaluation.precisions import PRECISIONS
from mlms.evaluation.query_terms import MAX_PAGE_SIZE, VIEWS

if TYPE_CHECKING:
    from mlms.evaluation.query import P50Row


def _until(moment: datetime | None) -> datetime | None:
    """A day alone ends at its last instant: ``--until 2026-01-31`` includes that day."""
    if moment is None or moment.time() != datetime.min.time():
        return moment
    return moment + timedelta(days=1) - timedelta(microseconds=1)


_DAY = click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"])


@click.command()
@click.option("--model", help="Only this model.")
@click.option("--framework", help="Only this framework (torch, onnxruntime, ...).")
@click.option("--hw", "hardware", metavar="ALIAS", help="Only this --hw alias (cpu, h100, ...).")
@click.option("--precision", type=click.Choice(PRECISIONS), help="Only this precision.")
@click.option("--status", type=click.Choice(["completed", "failed"]), help="Only this status.")
@click.option("--task", type=click.Choice(TASKS), help="Only accuracy on a data set of this task.")
@click.option("--since", type=_DAY, help="Created on or after (UTC): YYYY-MM-DD[THH:MM:SS].")
@click.option("--until", type=_DAY, help="Created on or before (UTC): YYYY-MM-DD[THH:MM:SS].")
@click.option("--sweep", "sweep_id", metavar="ID", help="Only the evaluations of this sweep.")
@click.option(
    "--search",
    default="",
    metavar="WORDS",
    help="Words each found in the id, model, framework, hardware, device or agent.",
)
@click.option(
    "--sort",
    default="-created",
    show_default=True,
    metavar="KEY",
    help="created, p50, throughput, accuracy (worse to better, lower perplexity counting as "
    "better: -accuracy is the best first; with --task), model or framework; '-' before: "
    "descending.",
)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Evaluations shown at most.",
)
@click.option(
    "--view",
    type=click.Choice(VIEWS),
    help="Instead of the list: best_p50 (the lowest p50 per model, hardware and batch "
    "size) or framework_versions (a model's p50 per framework version).",
)
@server_option
def evals(
    model: str | None,
    framework: str | None,
    hardware: str | None,
    precision: str | None,
    status: str | None,
    task: str | None,
    since: datetime | None,
    until: datetime | None,
    sweep_id: str | None,
    search: str,
    sort: str,
    limit: int,
    view: str | None,
    server: str | None,
) -> None:
    """List stored evaluations (newest first, the filters given all holding), and those still
    in flight on a fleet."""  # fmt: skip
    from mlms.evaluation.query import EvaluationQuery
    from mlms.reasons import one_line

    try:
        query = EvaluationQuery(
            model=model, framework=framework, hardware=hardware, precision=precision, task=task,
            status=status, since=since, until=_until(until), sweep_id=sweep_id, text=search,
            sort=sort, page_size=min(limit, MAX_PAGE_SIZE),
        )  # fmt: skip
    except ValidationError as exc:
        raise InvalidArgument(one_line(exc)) from None
    client = client_for(server)
    if view is not None:
        _print_view(view, client.view_evaluations(view, query))
        return
    listing = client.list_evaluations(query)
    summaries = list(listing.summaries)
    while listing.next_page_token and len(summaries) < limit:
        listing = client.list_evaluations(
            query.model_copy(update={"page_token": listing.next_page_token})
        )
        summaries.extend(listing.summaries)
    rows = [
        {
            "id": s.id[:12],
            "created (UTC)": s.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            "model": s.model,
            "framework": f"{s.framework} {s.framework_version}",
            "hardware": s.hardware_label,
            "options": s.options,
            "batch sizes": ",".join(map(str, s.batch_sizes)),
            "p50 first bs (ms)": s.p50_ms if s.p50_ms is not None else float("nan"),
            "accuracy": s.accuracy_line,
            "trace level": s.trace_level,
            "status": s.status,
        }
        for s in summaries[:limit]
    ]
    if rows:
        shown = f"{len(rows)} of {listing.total}" if listing.total > len(rows) else str(len(rows))
        out.print(rows_table(rows, f"evaluations ({shown}, sorted by {sort})"))
    if listing.in_flight:
        running = [
            {
                "id": job.evaluation_id[:12],
                "started (UTC)": job.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                "model": job.model,
                "state": job.state,
                "agent": job.agent_id or "",
                "attempt": job.attempt,
                "server": job.server,
            }
            for job in listing.in_flight
        ]
        out.print(rows_table(running, "in flight"))
    if not rows and not listing.in_flight:
        filtered = query.model_dump(exclude_defaults=True, exclude={"page_size"})
        out.print(
            "no evaluation matches these filters"
            if filtered
            else "no evaluations yet; run 'mlms eval --model resnet50'"
        )


def _print_view(view: str, rows: list[P50Row]) -> None:
    if not rows:
        out.print(f"no completed evaluation matches these filters ({view})")
        return
    table = [
        {
            "model": r.model,
            "hardware": r.hw,
            "batch size": r.batch_size,
            "framework": f"{r.framework} {r.framework_version}",
            "best p50 (ms)": r.p50_ms,
            "mean p50 (ms)": r.mean_p50_ms,
            "evaluations": r.evaluations,
            "best evaluation": r.evaluation_id[:12],
            "latest (UTC)": r.latest.strftime("%Y-%m-%d %H:%M"),
        }
        for r in rows
    ]
    titles = {
        "best_p50": "best p50 per model, hardware and batch size",
        "framework_versions": "p50 per framework version",
    }
    out.print(rows_table(table, titles[view]))
