"""``mlms report``: one self-contained HTML page of one or more evaluations, with plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from mlms.cli.files import writable, write_file
from mlms.cli.options import client_for, server_option, spans_for
from mlms.cli.render import err
from mlms.client import Client


@click.command()
@click.argument("evaluation_ids", nargs=-1, required=True, metavar="ID [ID ...]")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The HTML file to write.",
)
@server_option
def report(evaluation_ids: tuple[str, ...], output: Path, server: str | None) -> None:
    """Write an HTML report of the evaluations ID ...: latency and throughput per batch size,
    profiling overheads, layers, GPU kernels and rooflines, one predict's timeline, the lower
    bounds (`mlms bound`) measured against them and, for several IDs, how they differ. The
    file needs no network (plotly.js is inside it)."""
    writable(output)
    write_report(client_for(server), evaluation_ids, output)


def write_report(client: Client, evaluation_ids: Sequence[str], output: Path) -> None:
    """The report of the evaluations (each once) to ``output``, checked writable already."""
    records = list({r.id: r for r in map(client.get_evaluation, evaluation_ids)}.values())
    from mlms.report import bounds_for, build_report  # plotly loads only for this command

    bounds = bounds_for(records, client.list_bounds())
    page = build_report(records, spans_for(client, records), bounds=bounds)
    write_file(output, lambda path: path.write_text(page, encoding="utf-8"))
    err.print(f"wrote the report of {len(records)} evaluation(s) to {output}")
