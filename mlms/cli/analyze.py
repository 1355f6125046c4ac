"""``mlms analyze``: model-, layer- and layer-type tables of one evaluation, GPU tables too."""

from __future__ import annotations

import click

from mlms.analysis.gpu_tables import gpu_layers, top_kernels
from mlms.analysis.tables import latency_by_batch, latency_by_layer_type, slowest_layers
from mlms.cli.options import client_for, server_option
from mlms.cli.render import frame_table, out


@click.command()
@click.argument("evaluation_id")
@click.option("--top", default=10, show_default=True, help="How many slowest layers to show.")
@server_option
def analyze(evaluation_id: str, top: int, server: str | None) -> None:
    """Tables of an evaluation: latency vs batch size, slowest layers, latency by layer type.

    Evaluations traced at hardware or full on a GPU add each layer's GPU and non-GPU time (with
    its counters under full) and the kernels that take the most GPU time.
    """
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
    gpu = gpu_layers(spans)
    if gpu.empty:
        return
    out.print(
        frame_table(
            gpu.groupby("batch_size").head(top),
            f"{top} layers with the most non-GPU time (medians over iterations; bound: the "
            "roofline side of most of the layer's kernel time)",
        )
    )
    out.print(frame_table(top_kernels(spans, top), f"top {top} kernels by GPU time per predict"))
