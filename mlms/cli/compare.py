"""``mlms compare``: one model on several frameworks, one evaluation each, side by side."""

from __future__ import annotations

import re
from pathlib import Path

import click

from mlms.cli.common_options import client_for, server_option, spans_for
from mlms.cli.evaluation_options import run_fields, run_options
from mlms.cli.files import writable, write_file
from mlms.cli.render import err, frame_table, out, progress_bar
from mlms.errors import InvalidArgument
from mlms.frameworks import FRAMEWORKS
from mlms.user_input import parse_batch_sizes, validated


def parse_frameworks(text: str) -> list[str]:
    """``"torch,mxnet"`` -> ["torch", "mxnet"]; an unknown or repeated name is an error."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        if name not in FRAMEWORKS:
            raise InvalidArgument(
                f"unknown framework {name!r} in {text!r}: expected a comma-separated list of "
                f"{', '.join(FRAMEWORKS)}"
            )
    if not names or len(set(names)) != len(names):
        raise InvalidArgument(
            f"bad framework list {text!r}: expected distinct names, e.g. 'torch,onnxruntime'"
        )
    return names


@click.command("compare")
@click.option("--model", "-m", required=True, help="A zoo model; 'mlms models' lists them.")
@click.option(
    "--frameworks",
    "-f",
    default=",".join(FRAMEWORKS),
    show_default=True,
    help="Comma-separated frameworks, evaluated one after another.",
)
@click.option("--hw", default="cpu", show_default=True, help="cpu or a GPU alias.")
@click.option("--batch-size", "-b", "batch_sizes", default="1", show_default=True, help="e.g. 1,8.")
@click.option("--iterations", "-n", default=20, show_default=True, type=int)
@click.option("--warmup", default=3, show_default=True, type=int)
@click.option("--min-seconds", default=1.0, show_default=True, type=float)
@click.option(
    "--trace-level",
    "-t",
    default="framework",
    show_default=True,
    type=click.Choice(["model", "framework"], case_sensitive=False),
    help="framework: also count layers and their types (latency still from the model run).",
)
@click.option("--threads", type=int, default=None, help="Intra-op threads (framework default).")
@run_options
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the bar chart; default: compare-<model>-<hw>.png here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the records as a JSON list only.")
@server_option
def compare(
    model: str,
    frameworks: str,
    hw: str,
    batch_sizes: str,
    iterations: int,
    warmup: int,
    min_seconds: float,
    trace_level: str,
    threads: int | None,
    plot: Path | None,
    as_json: bool,
    server: str | None,
    **options: object,
) -> None:
    """Evaluate a model on several frameworks (sequentially) and compare them side by side."""
    from mlms.analysis.compare import compare_frameworks
    from mlms.analysis.plots import framework_comparison_chart
    from mlms.evaluation.record import EvaluationRequest

    names = parse_frameworks(frameworks)
    fields = run_fields(options)
    sizes = parse_batch_sizes(batch_sizes)
    # Checked before the evaluations, which take minutes.
    chart = None if as_json else writable(plot or Path(f"compare-{_file_stem(model)}-{hw}.png"))
    client = client_for(server)
    records = []
    for name in names:
        request = validated(
            EvaluationRequest,
            model=model,
            framework=name,
            hw=hw,
            batch_sizes=sizes,
            iterations=iterations,
            warmup=warmup,
            min_seconds=min_seconds,
            trace_level=trace_level,
            intra_op_threads=threads,
            **fields,
        )
        if not as_json:
            err.print(f"[bold]{model}[/] on [bold]{name}[/] ...")
        with progress_bar(enabled=not as_json) as progress:
            records.append(client.evaluate(request, progress))
    if as_json:
        click.echo("[" + ",\n".join(r.model_dump_json(indent=2) for r in records) + "]")
        return
    table = compare_frameworks(records, spans_for(client, records))
    first = records[0]
    title = (
        f"{model} on {first.device} ({first.hardware.cpu_brand}, "
        f"{first.hardware.cpu_cores_logical} cores)"
    )
    out.print(frame_table(table, title))
    assert chart is not None
    write_file(chart, lambda path: framework_comparison_chart(table, path, f"{model}, {hw}"))
    out.print(f"chart: {chart}")


def _file_stem(model: str) -> str:
    """A zoo name as it is; a model file, folder or Hub id by its last part, made safe for a
    file name (``/data/bert.onnx`` -> ``bert``, ``hf:org/name@v1`` -> ``name_v1``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(model.removeprefix("hf:")).stem) or "model"
