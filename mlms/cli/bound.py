"""``mlms bound``: how far a model is from the best its device's libraries allow (Benanza)."""

from __future__ import annotations

import click

from mlms.cli.common_options import client_for, server_option
from mlms.cli.render import frame_table, out, progress_bar
from mlms.evaluation.precisions import PRECISIONS
from mlms.user_input import parse_batch_sizes, validated


@click.command("bound")
@click.option(
    "--model",
    "-m",
    required=True,
    help="A zoo model ('mlms models' lists them) or a torch.export program (.pt2): a file, or "
    "one added with 'mlms models add'.",
)
@click.option(
    "--framework",
    "-f",
    default=None,
    help="The framework whose measured latency the bound is set against; default: the "
    "first installed the model supports.",
)
@click.option("--hw", default="cpu", show_default=True, help="cpu or a GPU alias (h100, ...).")
@click.option(
    "--batch-size", "-b", "batch_sizes", default="1", show_default=True,
    help="Comma-separated batch sizes, e.g. 1,64.",
)  # fmt: skip
@click.option(
    "--precision",
    "precisions",
    default=None,
    help=f"Comma-separated precisions for convolutions and GEMMs ({', '.join(PRECISIONS)}); "
    "default: every one the device has (fp32 on a CPU).",
)
@click.option(
    "--model-precision", default="fp32", show_default=True,
    help=f"The precision the model runs at ({', '.join(PRECISIONS)}), measured and bounded: "
    "at fp16 or bf16 every layer is benchmarked at it.",
)  # fmt: skip
@click.option(
    "--repeats", default=20, show_default=True, type=int,
    help="Timed samples of each layer implementation (on a GPU, four calls back to back each).",
)  # fmt: skip
@click.option(
    "--iterations", "-n", default=20, show_default=True, type=int,
    help="Measured predicts per batch size of the evaluation the bound is set against.",
)  # fmt: skip
@click.option(
    "--min-seconds", default=1.0, show_default=True, type=float,
    help="Measure the evaluation for at least this long per batch size.",
)  # fmt: skip
@click.option(
    "--top", default=10, show_default=True, type=click.IntRange(min=1),
    help="Slowest layers shown.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON, nothing else.")
@server_option
def bound(
    model: str,
    framework: str | None,
    hw: str,
    batch_sizes: str,
    precisions: str | None,
    model_precision: str,
    repeats: int,
    iterations: int,
    min_seconds: float,
    top: int,
    as_json: bool,
    server: str | None,
) -> None:
    """Lower-bound latency of a model from its layers' fastest library implementations,
    against a measured evaluation, with what-ifs: the best algorithm, fusion, tensor cores,
    parallel layers, no framework overhead. Layer benchmarks are kept in the store's perfdb
    and reused."""
    from mlms.bounds.record import BoundRequest
    from mlms.bounds.tables import bound_summary, slowest_layers, what_ifs

    request = validated(
        BoundRequest,
        model=model,
        framework=framework,
        hw=hw,
        batch_sizes=parse_batch_sizes(batch_sizes),
        precisions=[p.strip() for p in precisions.split(",")] if precisions else None,
        model_precision=model_precision,
        repeats=repeats,
        iterations=iterations,
        min_seconds=min_seconds,
    )
    client = client_for(server)
    with progress_bar(enabled=not as_json) as progress:
        record = client.bound(request, progress)
    if as_json:
        click.echo(record.model_dump_json(indent=2))
        return
    out.print(
        f"{record.model} on {record.framework} {record.framework_version}, {record.device_name}"
        f" ({', '.join(f'{k} {v}' for k, v in record.libraries.items())})"
    )
    out.print(
        f"layer configs: {record.benchmarked} benchmarked in {record.bench_seconds:.1f} s, "
        f"{record.cached} from the perfdb; precisions {', '.join(record.precisions)}; the "
        f"framework runs {', '.join(f'{k} in {v}' for k, v in record.framework_precisions.items())}"
    )
    out.print(frame_table(bound_summary(record), "Lower bounds (LBL) against the measurement"))
    out.print(frame_table(what_ifs(record), "What if"))
    columns = ["batch size", "layer", "kind", "measured (ms)", "framework alone (ms)",
               "bound (ms)", "measured/bound", "fastest"]  # fmt: skip
    out.print(
        frame_table(slowest_layers(record, top)[columns], "Slowest layers against their bounds")
    )
    out.print(f"bound {record.id}  (stored as bounds/{record.id}.json)")
