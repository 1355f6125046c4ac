"""``mlms trace export``: an evaluation's spans as Chrome/Perfetto JSON or Parquet."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mlms.cli.common_options import client_for, server_option
from mlms.cli.files import writable, write_file
from mlms.cli.render import err
from mlms.errors import InvalidArgument


@click.group()
def trace() -> None:
    """Work with the span archive of evaluations."""


@trace.command("export")
@click.argument("evaluation_id")
@click.option(
    "--format", "fmt", type=click.Choice(["chrome", "parquet"]), default="chrome", show_default=True
)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), required=True)
@server_option
def export(evaluation_id: str, fmt: str, output: Path, server: str | None) -> None:
    """Write the spans of EVALUATION_ID to a file (open Chrome JSON in ui.perfetto.dev)."""
    writable(output)
    client = client_for(server)
    record = client.get_evaluation(evaluation_id)
    if record.trace_id is None:
        raise InvalidArgument(f"evaluation {record.id} has no trace (trace level no_trace)")
    spans = client.spans(record.trace_id)
    if fmt == "chrome":
        from mlms.tracer.chrome import to_chrome

        text = json.dumps(to_chrome(spans))
        write_file(output, lambda path: path.write_text(text))
    else:
        import pyarrow.parquet as pq

        write_file(output, lambda path: pq.write_table(spans, path, compression="zstd"))
    err.print(f"wrote {len(spans)} spans of trace {record.trace_id} to {output}")
