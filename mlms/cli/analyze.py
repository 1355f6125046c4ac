"""``mlms analyze``: model-, layer- and layer-type tables of one evaluation, GPU tables too."""

from __future__ import annotations

import click

from mlms.analysis.kernels import kernel_breakdown, layer_kernels
from mlms.analysis.layers import layer_types, model_costs, slowest_layers
from mlms.analysis.model import latency_by_batch
from mlms.cli.options import client_for, server_option, spans_for
from mlms.cli.render import frame_table, out


@click.command()
@click.argument("evaluation_id")
@click.option("--top", default=10, show_default=True, help="How many layers and kernels to show.")
@server_option
def analyze(evaluation_id: str, top: int, server: str | None) -> None:
    """Tables of an evaluation: latency vs batch size, slowest layers, latency by layer type.

    Evaluations traced at hardware or full on a GPU add each layer's GPU and non-GPU time (with
    its counters under full) and the kernels that take the most GPU time. `mlms report` draws
    all of it (and more) as one HTML page.
    """
    if top < 1:
        raise click.BadParameter(f"{top} is not a positive count", param_hint="--top")
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
    spans = spans_for(client, [record])
    layers = slowest_layers(spans, top).drop(columns="trace_id")
    if layers.empty:
        out.print(
            "no layer spans: evaluate with --trace-level framework (or deeper) for layer tables"
        )
    else:
        costs = model_costs(spans).drop(columns="trace_id")
        if costs["GMACs"].notna().any():
            out.print(frame_table(costs, "model size per predict (the framework's own counts)"))
        out.print(frame_table(layers, f"slowest {top} layers (median over predicts)"))
        kinds = layer_types(spans).drop(columns="trace_id")
        out.print(frame_table(kinds, "latency by layer type"))
    gpu = layer_kernels(spans)
    if gpu.empty:
        return
    out.print(
        frame_table(
            gpu.groupby("batch_size").head(top).drop(columns="trace_id"),
            f"{top} layers with the most non-GPU time (medians over predicts; bound: the "
            "roofline side of most of the layer's kernel time)",
        )
    )
    kernels = kernel_breakdown(spans, top).drop(columns=["trace_id", "name"])
    columns = ["batch_size", "kernel", "calls", "gpu (us)", "share (%)", "median (us)"]
    columns += ["gflop", "dram (MB)", "flop/byte", "occupancy (%)", "bound"]
    out.print(frame_table(kernels[columns], f"top {top} kernels by GPU time per predict"))
