"""``mlms evals``: what has been evaluated."""

from __future__ import annotations

import click

from mlms.cli.options import client_for, server_option
from mlms.cli.render import out, rows_table


@click.command()
@server_option
def evals(server: str | None) -> None:
    """List stored evaluations, oldest first, and those still in flight on a fleet."""
    listing = client_for(server).list_evaluations()
    rows = []
    for record in listing.records:
        first = record.results[0] if record.results else None
        rows.append(
            {
                "id": record.id[:12],
                "created": record.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                "model": record.model.name,
                "framework": f"{record.framework.name} {record.framework.version}",
                "device": record.device,
                "batch sizes": ",".join(str(r.batch_size) for r in record.results),
                "p50 first bs (ms)": first.latency_ms.p50 if first else float("nan"),
                "trace level": record.trace_level,
                "options": record.request.options(),
            }
        )
    if rows:
        out.print(rows_table(rows, "evaluations"))
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
        out.print("no evaluations yet; run 'mlms eval --model resnet50'")
