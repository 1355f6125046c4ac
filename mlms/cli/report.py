"""``mlms report``: one self-contained HTML page of one or more evaluations, with plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mlms.cli.common_options import client_for, server_option, spans_for
from mlms.cli.files import writable, write_file
from mlms.cli.render import err
from mlms.client import Client

if TYPE_CHECKING:
    from mlms.advise.record import AdviceRecord

#: The shortest prefix of an advice's id that stands for it (an evaluation's prefix otherwise).
ADVICE_PREFIX = 8


def _verified(given: str, advice: Sequence[AdviceRecord]) -> list[str]:
    """The evaluations that verified the advice ``given`` names (a prefix of its id)."""
    wanted = given.lower()
    found = [a for a in advice if len(wanted) >= ADVICE_PREFIX and a.id.startswith(wanted)]
    if len(found) != 1:
        return []
    return [row.evaluation_id for row in found[0].rows if row.evaluation_id]


@click.command()
@click.argument("evaluation_ids", nargs=-1, required=True, metavar="ID [ID ...]")  # or advice
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
    bounds (`mlms bound`) measured against them, the advice (`mlms advise`) that verified
    them and, for several IDs, how they differ. An advice's id stands for the evaluations
    that verified it. The file needs no network (plotly.js is inside it)."""
    writable(output)
    write_report(client_for(server), evaluation_ids, output)


def write_report(client: Client, evaluation_ids: Sequence[str], output: Path) -> None:
    """The report of the evaluations (each once) to ``output``, checked writable already."""
    advice = client.list_advice()
    wanted = [e for i in evaluation_ids for e in _verified(i, advice) or [i]]
    records = list({r.id: r for r in map(client.get_evaluation, wanted)}.values())
    from mlms.report import advice_for, bounds_for, build_report  # plotly loads only here

    bounds = bounds_for(records, client.list_bounds())
    page = build_report(
        records, spans_for(client, records), bounds=bounds, advice=advice_for(records, advice)
    )
    write_file(output, lambda path: path.write_text(page, encoding="utf-8"))
    err.print(f"wrote the report of {len(records)} evaluation(s) to {output}")
