"""``mlms loadgen``: MLPerf LoadGen scenarios, or a concurrency sweep, on the predict path."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mlms.cli.common_options import connect, server_option
from mlms.cli.render import err, out
from mlms.errors import InvalidArgument

if TYPE_CHECKING:
    from mlms.loadgen.concurrency import SweepSettings
    from mlms.loadgen.record import CurvePoint, LoadRecord
    from mlms.loadgen.scenarios import ScenarioSettings
    from mlms.store.base import ObjectStore

SCENARIO_NAMES = ["single-stream", "multi-stream", "server", "offline"]


@click.command("loadgen")
@click.option("--model", "-m", required=True, help="A zoo model; 'mlms models' lists them.")
@click.option("--framework", "-f", default=None, help="Default: the first the model supports.")
@click.option("--hw", default="cpu", show_default=True, help="cpu or a GPU alias.")
@click.option(
    "--scenario",
    "-s",
    type=click.Choice(SCENARIO_NAMES),
    default="single-stream",
    show_default=True,
    help="The LoadGen scenario (not with --concurrency).",
)
@click.option(
    "--target-qps",
    type=float,
    default=None,
    help="Server: queries per second to send (default: half what a calibration measures); "
    "offline: the expected rate.",
)
@click.option(
    "--target-latency-ms",
    type=float,
    default=100.0,
    show_default=True,
    help="Server: the p99 latency a VALID run stays under.",
)
@click.option(
    "--duration",
    type=float,
    default=10.0,
    show_default=True,
    help="LoadGen's minimum duration in seconds.",
)
@click.option("--min-queries", type=int, default=None, help="Default: LoadGen's.")
@click.option("--samples-per-query", type=int, default=8, show_default=True, help="Multi-stream.")
@click.option(
    "--batch-size", "-b", type=int, default=1, show_default=True, help="Offline: per predict."
)
@click.option(
    "--workers", type=int, default=1, show_default=True, help="Server, offline: in flight."
)
@click.option(
    "--concurrency",
    default=None,
    metavar="START:END[:STEP]",
    help="A closed-loop sweep instead of a scenario, e.g. 1:16: a latency-throughput curve.",
)
@click.option(
    "--window",
    type=float,
    default=1.0,
    show_default=True,
    help="Sweep: seconds per measurement window.",
)
@click.option(
    "--max-windows",
    type=int,
    default=10,
    show_default=True,
    help="Sweep: windows per level before giving up on stability.",
)
@click.option(
    "--tensor-parallel", type=int, default=1, show_default=True, metavar="N",
    help="Split the model over N devices of --hw's kind (torch; see mlms eval): LoadGen runs in "
         "rank 0, which sends each batch to the other ranks; one query at a time.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON, nothing else.")
@server_option
def loadgen(
    model: str,
    framework: str | None,
    hw: str,
    scenario: str,
    target_qps: float | None,
    target_latency_ms: float,
    duration: float,
    min_queries: int | None,
    samples_per_query: int,
    batch_size: int,
    workers: int,
    concurrency: str | None,
    window: float,
    max_windows: int,
    tensor_parallel: int,
    as_json: bool,
    server: str | None,
) -> None:
    """Drive a model's predict path with MLPerf LoadGen and print its summary.

    Without --server the model is loaded here; with it, every query is a predict through the
    server to an agent. LoadGen's logs and the mlms record go to the local store, under
    loadgen/<id>/. With --tensor-parallel the model's ranks run here, one process each.
    """
    from mlms.loadgen.concurrency import SweepSettings, parse_levels
    from mlms.loadgen.run import run_loadgen, run_sweep
    from mlms.loadgen.scenarios import ScenarioSettings
    from mlms.loadgen.targets import open_target
    from mlms.store.factory import default_store

    store = default_store()
    if concurrency is not None:
        settings = SweepSettings(parse_levels(concurrency), window, max_windows)
    else:
        scenario_settings = ScenarioSettings(
            scenario,
            duration_ms=max(1, round(duration * 1000)),
            min_queries=min_queries,
            target_qps=target_qps,
            target_latency_ms=target_latency_ms,
            samples_per_query=samples_per_query,
            batch_size=batch_size,
            workers=workers,
        )
    run_settings = settings if concurrency is not None else scenario_settings
    if tensor_parallel != 1:
        _split(model, framework, hw, tensor_parallel, run_settings, store, as_json, server)
        return
    target = open_target(model, framework, hw, connect(server) if server else None)
    try:
        if concurrency is not None:
            if not as_json:
                out.print(_curve_header())
            record = run_sweep(
                target,
                settings,
                store,
                on_point=(lambda _point: None) if as_json else lambda p: out.print(_row(p)),
            )
        else:
            with tempfile.TemporaryDirectory(prefix="mlms-loadgen-") as log_dir:
                record = run_loadgen(target, scenario_settings, store, Path(log_dir))
                if not as_json:
                    from mlms.loadgen.logs import summary_text

                    out.print(summary_text(Path(log_dir)), markup=False, highlight=False)
    finally:
        target.close()
    if as_json:
        click.echo(record.model_dump_json(indent=2))
        return
    _report(record, store.url)


def _split(
    model: str,
    framework: str | None,
    hw: str,
    tensor_parallel: int,
    settings: ScenarioSettings | SweepSettings,
    store: ObjectStore,
    as_json: bool,
    server: str | None,
) -> None:
    """The run on the model split over ``tensor_parallel`` ranks, here."""
    from mlms.evaluation.record import EvaluationRequest
    from mlms.loadgen.split import run_split
    from mlms.user_input import validated

    request = validated(
        EvaluationRequest, model=model, framework=framework, hw=hw, tensor_parallel=tensor_parallel
    )
    if server is not None:
        raise InvalidArgument(
            f"--tensor-parallel {tensor_parallel} with --server: an agent answers predicts in "
            "one process, which holds a whole model; run the split here, without --server"
        )
    split = run_split(request, settings, store)
    if as_json:
        click.echo(split.record.model_dump_json(indent=2))
        return
    if split.summary is not None:
        out.print(split.summary, markup=False, highlight=False)
    else:
        out.print(_curve_header())
        for point in split.record.curve:
            out.print(_row(point))
    _report(split.record, store.url)


def _report(record: LoadRecord, store_url: str) -> None:
    """mlms's numbers, then where the record went."""
    _print_mlms(record)
    stored = "record and LoadGen's logs" if record.logs else "record"
    # One line however narrow the terminal: the location is copied, not read.
    err.print(f"{stored}: {store_url}/loadgen/{record.id}/", soft_wrap=True, highlight=False)


def _print_mlms(record: LoadRecord) -> None:
    if record.mlms is not None:
        line = (
            f"mlms's own clock: p50 {record.mlms.p50_ms:.3f} ms, p90 {record.mlms.p90_ms:.3f} ms, "
            f"p99 {record.mlms.p99_ms:.3f} ms over {record.mlms.samples:,} samples"
        )
        if record.p90_ratio is not None:
            line += f"; LoadGen p90 / mlms p90 = {record.p90_ratio:.4f}"
        out.print(line, highlight=False)
    if record.validity == "INVALID":
        out.print(f"INVALID because: {'; '.join(record.invalid_because) or 'see the summary'}")
    unstable = [p.concurrency for p in record.curve if not p.stable]
    if unstable:
        out.print(
            f"not stable within 10% over 3 windows at concurrency {unstable}: "
            "their points are the last windows measured"
        )


def _curve_header() -> str:
    return (
        f"{'concurrency':>11} {'samples/s':>10} {'p50 ms':>9} {'p90 ms':>9} {'p99 ms':>9} "
        f"{'windows':>7} stable"
    )


def _row(point: CurvePoint) -> str:
    return (
        f"{point.concurrency:>11} {point.throughput_per_s:>10,.1f} {point.p50_ms:>9.3f} "
        f"{point.p90_ms:>9.3f} {point.p99_ms:>9.3f} {point.windows:>7} "
        f"{'yes' if point.stable else 'no'}"
    )
