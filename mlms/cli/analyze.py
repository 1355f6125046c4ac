"""``mlms analyze``: model-, layer- and layer-type tables of one evaluation, GPU tables too."""

from __future__ import annotations

from typing import Any

import click

from mlms.cli.common_options import client_for, server_option, without_collector
from mlms.cli.render import frame_table, out

#: The span analyses the command prints (``mlms.analysis.catalog``), computed in one call: next
#: to the store when a server is given.
TABLES = ("model_costs", "slowest_layers", "layer_types", "layer_kernels", "kernel_breakdown")
#: The distributed section's analyses, asked for (in the same call) only of an evaluation of
#: several ranks.
DISTRIBUTED = ("rank_breakdown", "comm_overlap", "rank_skew", "collectives")
BREAKDOWN_COLUMNS = ["batch_size", "rank", "compute (%)", "communication (%)", "memory (%)"]
BREAKDOWN_COLUMNS += ["other (%)", "idle (%)", "span (us)"]
KERNEL_COLUMNS = ["batch_size", "kernel", "calls", "gpu (us)", "share (%)", "median (us)"]
KERNEL_COLUMNS += ["gflop", "dram (MB)", "flop/byte", "occupancy (%)", "bound"]


@click.command()
@click.argument("evaluation_id")
@click.option("--top", default=10, show_default=True, help="How many layers and kernels to show.")
@server_option
@without_collector
def analyze(evaluation_id: str, top: int, server: str | None) -> None:
    """Tables of an evaluation: latency and energy vs batch size, model size, slowest layers,
    latency by layer type.

    Evaluations traced at hardware or full on a GPU add each layer's GPU and non-GPU time (with
    its counters under full) and the kernels that take the most GPU time. A trace of several
    ranks (tensor parallel, or an imported folder of rank traces) adds each rank's temporal
    breakdown, its communication/computation overlap, the rank skew per iteration and each
    collective's bandwidth. `mlms report` draws all of it (and more) as one HTML page.
    """
    from mlms.analysis.model import (
        conditions_by_batch,
        energy_by_batch,
        energy_reasons,
        latency_by_batch,
    )
    from mlms.analysis.record_ranks import record_ranks
    from mlms.evaluation.summary import gpu_label

    if top < 1:
        raise click.BadParameter(f"{top} is not a positive count", param_hint="--top")
    client = client_for(server)
    record = client.get_evaluation(evaluation_id)
    out.print(
        frame_table(
            latency_by_batch(record),
            f"{record.model.name} on "
            f"{record.framework.name}, {gpu_label(record)}: latency vs batch size",
        )
    )
    energy = energy_by_batch(record)
    if not energy.empty:
        out.print(frame_table(energy, "energy vs batch size (model-level run)", digits=4))
    for reason in energy_reasons(record):
        out.print(f"energy not measured for {reason}", markup=False)
    conditions = conditions_by_batch(record)
    if not conditions.empty:
        out.print(frame_table(conditions, "run conditions (model-level run)", digits=1))
    if record.accuracy is not None:
        acc = record.accuracy
        out.print(f"accuracy on {acc.dataset} ({acc.task}): {acc.line()}", markup=False)
    if record.trace_id is None:
        out.print("no trace was recorded (trace level no_trace)")
        return
    distributed = record_ranks(record) > 1
    names = TABLES + DISTRIBUTED if distributed else TABLES
    tables = {
        name: table.drop(columns="trace_id")
        for name, table in client.analyze([record.id], names, top).items()
    }
    if tables["slowest_layers"].empty:
        out.print(
            "no layer spans: evaluate with --trace-level framework (or deeper) for layer tables"
        )
    else:
        costs = tables["model_costs"]
        if costs["GMACs"].notna().any():
            out.print(frame_table(costs, "model size per predict (the framework's own counts)"))
        out.print(
            frame_table(tables["slowest_layers"], f"slowest {top} layers (median over predicts)")
        )
        out.print(frame_table(tables["layer_types"], "latency by layer type"))
    gpu = tables["layer_kernels"]
    if not gpu.empty:
        _gpu_tables(tables, top)
    if distributed and tables["rank_breakdown"]["rank"].nunique() > 1:
        _distributed_tables(tables, top)


def _gpu_tables(tables: dict[str, Any], top: int) -> None:
    gpu = tables["layer_kernels"]
    out.print(
        frame_table(
            gpu.groupby("batch_size").head(top),
            f"{top} layers with the most non-GPU time (medians over predicts; bound: the "
            "roofline side of most of the layer's kernel time)",
        )
    )
    kernels = tables["kernel_breakdown"][KERNEL_COLUMNS]
    out.print(frame_table(kernels, f"top {top} kernels by GPU time per predict"))


def _distributed_tables(tables: dict[str, Any], top: int) -> None:
    """The section of a trace of several ranks."""
    breakdown = tables["rank_breakdown"]
    activity = "GPU" if (breakdown["activity"] == "gpu").all() else "host"
    out.print(
        frame_table(
            breakdown[BREAKDOWN_COLUMNS],
            f"time per rank ({activity} activity; HTA's temporal breakdown, % of its span)",
        )
    )
    out.print(
        frame_table(tables["comm_overlap"], "communication overlapped by computation per rank")
    )
    skew = tables["rank_skew"]
    out.print(
        frame_table(
            skew[skew["iteration"] < top],
            f"rank skew, first {min(top, skew['iteration'].nunique())} iterations "
            "(wait: how long after this rank the last one joined its collectives)",
        )
    )
    collectives = tables["collectives"].groupby("rank").head(top)
    out.print(frame_table(collectives, "collectives per rank (bus bandwidth as nccl-tests)"))
