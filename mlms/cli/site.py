"""``mlms site``: a static results site of one stored sweep (``mlms.report.site``)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from mlms.cli.render import err
from mlms.errors import InvalidArgument


@click.command()
@click.argument("sweep_id", metavar="SWEEP_ID")
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The folder to write the site into (made if missing).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=lambda: len(os.sched_getaffinity(0)),
    show_default="the cores this process may run on",
    help="Processes writing the model pages, each a share of the models.",
)
def site(sweep_id: str, output: Path, workers: int) -> None:
    """Write a static results site of the sweep SWEEP_ID from this machine's store: an index
    of every model (throughput against batch size, peak throughput and its batch, latency at
    batch 1, energy per inference where measured; filterable by task) and one report page per
    model. The pages share one plotly.js and fetch nothing from the network."""
    if output.exists() and not output.is_dir():
        raise InvalidArgument(f"--output {str(output)!r} is a file: expected a folder")
    from mlms.catalog.resolve import resolve_model
    from mlms.client import EmbeddedClient
    from mlms.evaluation.sweep import load_sweep
    from mlms.report.site import write_site  # plotly loads only for this command

    client = EmbeddedClient()
    sweep = load_sweep(client.store, sweep_id)
    # A group's cells share one evaluation: each record once.
    done = dict.fromkeys(cell.evaluation_id for cell in sweep.cells if cell.state == "completed")
    records = [client.get_evaluation(evaluation_id) for evaluation_id in done]
    tasks = {}
    for name in dict.fromkeys(cell.model for cell in sweep.cells):
        tasks[name] = resolve_model(name, client.store).task
    archives = {r.trace_id: client.span_archive(r.trace_id) for r in records if r.trace_id}
    written = write_site(sweep, records, tasks, archives, output, workers)
    size = sum(path.stat().st_size for path in written)
    err.print(
        f"wrote the site of sweep {sweep.id} ({len(tasks)} models, {len(records)} evaluations, "
        f"{size / 1e6:.1f} MB) to {output}/index.html"
    )
