"""``mlms analyze``: model-, layer- and layer-type tables of one evaluation."""

from __future__ import annotations

import click

from mlms.analysis.tables import latency_by_batch, latency_by_layer_type, slowest_layers
from mlms.cli.options import client_for, server_option
from mlms.cli.render import frame_table, out


@click.command()
@click.argument("evaluation_id")
@click.option("--top", default=10, show_default=True, help="How many slowest layers to show.")
@server_option
def analyze(evaluation_id: str, top: int, server: str | None) -> None:
    """Tables of an evaluation: latency vs batch size, slowest layers, latency by layer type."""
    client = client_for(server)
    record = client.get_evaluation(evaluation_id)
    out.print(
        frame_table(
            latency_by_batch(record),
            f"{record.model.name} on "
            f"{record.framework.name}, {record.device}: latency vs batch size",
        )
    )
    if record.trace_id is None:
        out.print("no trace was recorded (trace level no_trace)")
        return
    spans = client.spans(record.trace_id)
    layers = slowest_layers(spans, top)
    if layers.empty:
        out.print(
            "no layer spans: evaluate with --trace-level framework (or deeper) for layer tables"
        )
        return
    out.print(frame_table(layers, f"slowest {top} layers (median over iterations)"))
    out.print(frame_table(latency_by_layer_type(spans), "latency by layer type"))
