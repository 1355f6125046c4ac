"""``mlms eval``: evaluate one model on one framework and device."""

from __future__ import annotations

import click

from mlms.cli.common_options import client_for, server_option
from mlms.cli.evaluation_options import run_fields, run_options
from mlms.cli.render import out, progress_bar, record_summary
from mlms.tracer.levels import TraceLevel
from mlms.user_input import parse_batch_sizes, validated

LEVELS = [level.label for level in TraceLevel]


@click.command("eval")
@click.option(
    "--model",
    "-m",
    required=True,
    help="A zoo or added model ('mlms models' lists them), a model file or folder, or hf:ORG/NAME.",
)
@click.option(
    "--framework",
    "-f",
    default=None,
    help="torch, onnxruntime, ...; default: the first installed the model supports.",
)
@click.option(
    "--hw",
    default="cpu",
    show_default=True,
    help="cpu or a GPU alias (v100, a100, h100, h200, t4, ...).",
)
@click.option(
    "--batch-size",
    "-b",
    "batch_sizes",
    default="1",
    show_default=True,
    help="Comma-separated batch sizes, e.g. 1,8,32.",
)
@click.option(
    "--iterations",
    "-n",
    default=20,
    show_default=True,
    type=int,
    help="At least this many measured predicts per batch size and level.",
)
@click.option(
    "--warmup",
    default=3,
    show_default=True,
    type=int,
    help="Untraced, uncounted predicts before measuring.",
)
@click.option(
    "--min-seconds",
    default=1.0,
    show_default=True,
    type=float,
    help="Measure for at least this long per batch size and level.",
)
@click.option(
    "--trace-level",
    "-t",
    default="model",
    show_default=True,
    type=click.Choice(LEVELS, case_sensitive=False),
    help="Deepest level to trace; one measured run per level up to it.",
)
@click.option(
    "--input",
    "-i",
    "inputs",
    multiple=True,
    default=["synthetic"],
    show_default=True,
    help="synthetic, dataset, or image files (repeatable).",
)
@click.option(
    "--dataset",
    "-d",
    default=None,
    metavar="NAME[@VERSION]",
    help="A data set in the store ('mlms datasets'): one pass over it per batch size, with "
    "its accuracy.",
)
@click.option("--threads", type=int, default=None, help="Intra-op threads (framework default).")
@run_options
@click.option(
    "--generate",
    type=int,
    default=None,
    metavar="N",
    help="Language models: also decode N tokens per input (time to first token, per token).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON, nothing else.")
@server_option
def evaluate(
    model: str,
    framework: str | None,
    hw: str,
    batch_sizes: str,
    iterations: int,
    warmup: int,
    min_seconds: float,
    trace_level: str,
    inputs: tuple[str, ...],
    dataset: str | None,
    threads: int | None,
    generate: int | None,
    as_json: bool,
    server: str | None,
    **options: object,
) -> None:
    """Evaluate a model: latency percentiles, throughput and accuracy per batch size."""
    from mlms.evaluation.record import EvaluationRequest

    request = validated(
        EvaluationRequest,
        model=model,
        framework=framework,
        hw=hw,
        batch_sizes=parse_batch_sizes(batch_sizes),
        iterations=iterations,
        warmup=warmup,
        min_seconds=min_seconds,
        trace_level=trace_level,
        inputs=list(inputs),
        intra_op_threads=threads,
        generate=generate,
        dataset=dataset,
        **run_fields(options),
    )
    client = client_for(server)
    with progress_bar(enabled=not as_json) as progress:
        record = client.evaluate(request, progress)
    if as_json:
        click.echo(record.model_dump_json(indent=2))
    else:
        record_summary(record)
        out.print(f"next: mlms analyze {record.id[:12]}")
