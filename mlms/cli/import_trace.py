"""``mlms import``: bring traces recorded by other tools into the store as evaluations."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from mlms.cli.common_options import store_option, without_collector
from mlms.errors import InvalidArgument


@click.group("import")
def import_trace() -> None:
    """Import another profiler's trace as an evaluation (then: mlms analyze ID)."""


@import_trace.command("kineto")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--model", default=None, help="Model name for the record; default: the file's.")
@click.option(
    "--batch-size",
    default=None,
    help="Inputs per ProfilerStep (Kineto does not record it); default 1, said when assumed.",
)
@store_option
@without_collector
def kineto(trace: Path, model: str | None, batch_size: str | None, store: str | None) -> None:
    """Import a PyTorch profiler (Kineto) trace, TRACE.json or TRACE.json.gz, or a folder of
    rank traces (one a process, each naming its distributedInfo.rank, as HTA reads them) into
    one evaluation: ProfilerSteps become predicts, aten ops layers, CUDA calls and kernels the
    levels below, every span with its rank."""
    # The arguments and the trace are checked before the record's modules (scipy, pydantic's
    # records) load: a bad file is answered at once.
    size = 1 if batch_size is None else _batch_size(batch_size)
    from mlms.analysis.kineto_ranks import read_kineto_path

    imported = read_kineto_path(trace, batch_size=size)
    if imported.table.num_rows == 0:
        raise InvalidArgument(
            f"{trace} has no profiler events (ProfilerStep, cpu_op, cuda_runtime, kernel): "
            "expected a trace recorded by torch.profiler"
        )
    import pyarrow.compute as pc

    from mlms.analysis.kineto_record import import_record, whole_trace
    from mlms.evaluation.record_store import save_record
    from mlms.store.factory import store_from_url
    from mlms.tracer.archive import write_table
    from mlms.tracer.levels import TraceLevel

    target = store_from_url(store)
    record = import_record(
        imported,
        source=trace.name,
        model=model or _model_name(trace),
        batch_size=size,
        archive=write_table(target, imported.trace_id, imported.table),
    )
    save_record(target, record)
    kernels = pc.sum(pc.equal(imported.table["kind"], "kernel")).as_py() or 0
    nccl = pc.sum(
        pc.and_(
            pc.equal(imported.table["kind"], "communication"),
            pc.equal(imported.table["level"], int(TraceLevel.HARDWARE)),
        )
    ).as_py()
    steps = record.results[0]
    ranks = len(imported.sources)
    counted = (
        "no ProfilerStep: the whole trace is one predict"
        if whole_trace(imported.table)
        else f"{steps.iterations} ProfilerSteps"
        + (" (the slowest rank's each)" if ranks > 1 else "")
    )
    click.echo(
        f"imported {trace.name}: {imported.table.num_rows:,} spans, {kernels:,} kernels"
        f"{f' and {nccl:,} NCCL kernels' if nccl else ''}, {counted} "
        f"(p50 {steps.latency_ms.p50:.3f} ms)"
    )
    if ranks > 1:
        for line in _rank_sums(imported.table, imported.sources):
            click.echo(line)
    if batch_size is None:  # throughput and per-input numbers depend on it: never silently
        predict = "the trace's one predict" if whole_trace(imported.table) else "each ProfilerStep"
        click.echo(
            f"mlms: note: batch size 1 assumed for {predict} (Kineto does not record it); "
            "give --batch-size N if it held N inputs",
            err=True,
        )
    click.echo(f"evaluation {record.id}  trace {record.trace_id}")


def _rank_sums(table: Any, sources: dict[int, str]) -> list[str]:
    """Per rank: its file, its spans and, where it has kernels, their summed durations with
    NCCL's apart (in ns, to check against the raw traces)."""
    import pyarrow.compute as pc

    from mlms.analysis.kineto_ranks import kernel_sums

    sums = kernel_sums(table)
    spans = dict(
        zip(*(c.to_pylist() for c in pc.value_counts(table["rank"]).flatten()), strict=True)
    )
    lines = []
    for rank, name in sources.items():
        line = f"rank {rank} ({name}): {spans.get(rank, 0):,} spans"
        kernels = sums.get((rank, "kernel"), (0, 0))
        nccl = sums.get((rank, "communication"), (0, 0))
        if kernels[0] or nccl[0]:
            line += (
                f", {kernels[0]:,} kernels {kernels[1]:,} ns, "
                f"{nccl[0]:,} NCCL kernels {nccl[1]:,} ns"
            )
        lines.append(line)
    return lines


def _batch_size(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise InvalidArgument(f"bad --batch-size {text!r}: expected a positive integer like 8")
    return int(text)


def _model_name(trace: Path) -> str:
    """``resnet18.json.gz`` -> resnet18; the tensorboard handler's ``.pt.trace`` too; a
    folder's own name."""
    return re.sub(r"(\.pt\.trace)?\.json(\.gz)?$", "", trace.name) or trace.name
