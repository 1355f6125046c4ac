"""``mlms sweep``: models x frameworks x precisions x batch sizes x hardware, one evaluation
for the batch sizes of each model, framework, precision and hardware, in parallel over the
fleet (with ``--server``), resumable by the sweep's id."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mlms.cli.common_options import client_for, server_option
from mlms.cli.compare import parse_frameworks
from mlms.cli.files import writable
from mlms.cli.render import err, out
from mlms.cli.report import write_report
from mlms.errors import InvalidArgument
from mlms.user_input import parse_batch_sizes, validated

if TYPE_CHECKING:
    from mlms.client import Client
    from mlms.evaluation.sweep import SweepState

#: ``--models`` selectors: every zoo model, and every zoo model of one task.
ZOO = "zoo"
TASK = "task:"


def parse_names(text: str, what: str) -> list[str]:
    """``"resnet50,vgg16"`` -> ["resnet50", "vgg16"]; an empty or repeated name is an error."""
    names = [part.strip() for part in text.split(",")]
    if not all(names) or len(set(names)) != len(names):
        example = {"model": "resnet50,vgg16", "precision": "fp32,bf16"}.get(what, "cpu,h100")
        raise InvalidArgument(
            f"bad {what} list {text!r}: expected distinct comma-separated names, e.g. {example}"
        )
    return names


def select_models(text: str, client: Client) -> list[str]:
    """``--models``: names (zoo, ``timm:NAME``, added, ...) and selectors, ``zoo`` (every zoo
    model) and ``task:TASK`` (every zoo model of the task), each model once, in order."""
    from mlms.manifest import TASKS

    items = parse_names(text, "model")
    if not any(item == ZOO or item.startswith(TASK) for item in items):
        return items
    zoo = [m for m in client.list_models() if m.origin == "zoo"]
    chosen: dict[str, None] = {}
    for item in items:
        if item == ZOO:
            chosen.update(dict.fromkeys(m.name for m in zoo))
        elif item.startswith(TASK):
            task = item.removeprefix(TASK)
            if task not in TASKS:
                raise InvalidArgument(
                    f"--models {item}: unknown task {task!r}; expected one of {', '.join(TASKS)}"
                )
            chosen.update(dict.fromkeys(m.name for m in zoo if m.task == task))
        else:
            chosen[item] = None
    return list(chosen)


@click.command("sweep")
@click.option(
    "--models",
    "-m",
    default=None,
    help="Comma-separated models (e.g. resnet50,timm:resnet18), or the selectors zoo (every "
    "zoo model) and task:TASK (every zoo model of the task, e.g. task:object_detection).",
)
@click.option("--frameworks", "-f", default=None, help="Comma-separated, e.g. torch,onnxruntime.")
@click.option(
    "--batch-size", "-b", "batch_sizes", default="1", show_default=True, help="e.g. 1,8,32."
)
@click.option("--hw", default="cpu", show_default=True, help="Comma-separated, e.g. cpu,h100.")
@click.option(
    "--precisions",
    default=None,
    help="Comma-separated, e.g. fp32,bf16 (default: fp32, as mlms eval). Of fp32, tf32, fp16, "
    "bf16.",
)
@click.option("--iterations", "-n", default=20, show_default=True, type=int)
@click.option("--warmup", default=3, show_default=True, type=int)
@click.option("--min-seconds", default=1.0, show_default=True, type=float)
@click.option(
    "--tensor-parallel",
    default=1,
    show_default=True,
    type=int,
    metavar="N",
    help="Split every cell's model over N devices of its --hw (torch; see mlms eval).",
)
@click.option(
    "--cudnn-benchmark",
    is_flag=True,
    help="Every cell with cuDNN's autotuning (torch on a GPU; see mlms eval).",
)
@click.option("--resume", "resume", default=None, metavar="ID", help="Resume the sweep ID.")
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the HTML report of the completed evaluations (mlms report) to this file.",
)
@server_option
def sweep(
    models: str | None,
    frameworks: str | None,
    batch_sizes: str,
    hw: str,
    precisions: str | None,
    iterations: int,
    warmup: int,
    min_seconds: float,
    tensor_parallel: int,
    cudnn_benchmark: bool,
    resume: str | None,
    report: Path | None,
    server: str | None,
) -> None:
    """Evaluate every combination of models, frameworks, precisions, batch sizes and hardware:
    one evaluation (one model load) for the batch sizes of each model, framework, precision and
    hardware, in parallel over the server's agents (one evaluation an agent at a time) with
    --server, one after another here without. The sweep is stored as it goes; after a crash of
    this command or of the server, --resume ID runs what is left (nothing twice)."""
    from mlms.evaluation.sweep import SweepSpec

    spec = None
    client = client_for(server)
    # Unset: the spec's own default (the evaluation's).
    chosen = {} if precisions is None else {"precisions": parse_names(precisions, "precision")}
    if resume is None:
        if models is None or frameworks is None:
            raise InvalidArgument("mlms sweep needs --models and --frameworks, or --resume ID")
        spec = validated(
            SweepSpec,
            models=select_models(models, client),
            frameworks=parse_frameworks(frameworks),
            batch_sizes=parse_batch_sizes(batch_sizes),
            hw=parse_names(hw, "hardware"),
            iterations=iterations,
            warmup=warmup,
            min_seconds=min_seconds,
            tensor_parallel=tensor_parallel,
            cudnn_benchmark=cudnn_benchmark,
            **chosen,
        )
    elif models is not None or frameworks is not None or precisions is not None or cudnn_benchmark:
        raise InvalidArgument(
            f"--resume {resume} runs the stored sweep as it was given: expected no --models, "
            "--frameworks or --precisions with it, nor --cudnn-benchmark"
        )
    if report is not None:
        writable(report)  # checked before the evaluations, which take minutes
    for name in spec.models if spec is not None else ():
        client.model(name)  # an unknown model, before any cell runs
    with sweep_progress() as changed:
        final = client.sweep(spec, resume, changed)
    out.print(summary(final))
    done = [cell.evaluation_id for cell in final.cells if cell.state == "completed"]
    if report is not None and done:
        write_report(client, done, report)
    failed = final.count("failed")
    if failed:
        raise click.ClickException(
            f"{failed} of {len(final.cells)} cells failed; "
            f"'mlms sweep --resume {final.id}' runs them again"
        )


@contextmanager
def sweep_progress() -> Iterator[Callable[[SweepState], None]]:
    """The sweep's id once (to resume it), and a bar of finished cells on a terminal."""
    announced: list[str] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("sweep", total=None)

        def changed(state: SweepState) -> None:
            if not announced:
                announced.append(state.id)
                err.print(
                    f"sweep {state.id}: {len(state.cells)} cells in "
                    f"{len(set(c.evaluation_id for c in state.cells))} evaluations "
                    f"(resume with: mlms sweep --resume {state.id})"
                )
            running = [c.describe() for c in state.cells if c.state == "running"]
            bar.update(
                task,
                total=len(state.cells),
                completed=state.count("completed") + state.count("failed"),
                description=f"running: {'; '.join(running)[:60] or '-'}",
            )

        yield changed


def summary(state: SweepState) -> Table:
    table = Table(
        title=f"sweep {state.id}",
        caption=f"'mlms evals --sweep {state.id}' lists its evaluations",
    )
    for column in ("model", "framework", "precision", "batch", "hw", "state", "p50 (ms)",
                   "inputs/s", "J/inference", "agent", "evaluation"):  # fmt: skip
        table.add_column(column)
    for cell in state.cells:
        table.add_row(
            cell.model,
            cell.framework,
            cell.precision,
            str(cell.batch_size),
            cell.hw,
            cell.state if cell.error is None else f"{cell.state}: {cell.error}",
            "" if cell.p50_ms is None else f"{cell.p50_ms:.3f}",
            "" if cell.throughput is None else f"{cell.throughput:.1f}",
            "" if cell.joules_per_inference is None else f"{cell.joules_per_inference:.4g}",
            cell.agent_id or "",
            cell.evaluation_id,
        )
    return table
