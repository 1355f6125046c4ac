"""Rich tables for records and DataFrames (stdout), progress bars (stderr)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mlms.evaluation.progress import Progress as RunProgress
from mlms.evaluation.progress import ProgressCallback

if TYPE_CHECKING:
    import pandas as pd

    from mlms.evaluation.record import EvaluationRecord

# Piped output gets room for the wide tables instead of rich's 80-column default.
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 240)
err = Console(stderr=True)


def frame_table(frame: pd.DataFrame, title: str, digits: int = 3) -> Table:
    """A DataFrame (an analysis's result) as a table."""
    import pandas as pd

    columns = [str(column) for column in frame.columns]
    numeric = [pd.api.types.is_numeric_dtype(frame[column]) for column in frame.columns]
    return _table(title, columns, numeric, list(frame.itertuples(index=False)), digits)


def rows_table(rows: Sequence[Mapping[str, object]], title: str, digits: int = 3) -> Table:
    """Rows of plain values (the keys of the first row are the columns) as a table, without
    pandas: the listing commands stay quick to start."""
    columns = list(rows[0]) if rows else []
    values = [tuple(row[column] for column in columns) for row in rows]
    numeric = [
        all(isinstance(v, int | float) and not isinstance(v, bool) for v in column if v is not None)
        for column in zip(*values, strict=True)
    ] or [False] * len(columns)
    return _table(title, columns, numeric, values, digits)


def _table(
    title: str,
    columns: list[str],
    numeric: list[bool],
    rows: Sequence[Sequence[object]],
    digits: int,
) -> Table:
    table = Table(title=title, title_justify="left")
    for column, is_numeric in zip(columns, numeric, strict=True):
        table.add_column(column, justify="right" if is_numeric else "left")
    # A count column with a gap is float in pandas: whole numbers print without decimals.
    whole = [all(_whole(row[i]) for row in rows) for i in range(len(columns))]
    # Cells are data, never markup: as Text, rich neither parses nor highlights them (a value
    # holding '[' prints as it is, and parsing 82 rows of markup was a sixth of their render).
    for row in rows:
        table.add_row(*(Text(_cell(value, digits, whole[i])) for i, value in enumerate(row)))
    return table


def _whole(value: object) -> bool:
    return not isinstance(value, float) or value != value or value.is_integer()


def _cell(value: object, digits: int, whole: bool) -> str:
    if isinstance(value, float):
        if value != value:
            return ""
        return f"{value:,.0f}" if whole else f"{value:,.{digits}f}"
    if value is None:
        return ""
    return str(value)


def record_summary(record: EvaluationRecord) -> None:
    from mlms.analysis.model import energy_reasons, latency_by_batch
    from mlms.evaluation.conditions import unsteady
    from mlms.evaluation.summary import gpu_label

    hw = record.hardware
    device = gpu_label(record)
    title = (
        f"{record.model.name} {record.model.version} on {record.framework.name} "
        f"{record.framework.version}, {device} ({hw.cpu_brand}, "
        f"{hw.cpu_cores_logical} cores)"
    )
    out.print(frame_table(latency_by_batch(record), title))
    for reason in energy_reasons(record):
        err.print(f"[dim]energy not measured[/] for {escape(reason)}")
    for result in record.results:
        if result.latency_ms.warning:
            err.print(
                f"[yellow]warning[/] batch size {result.batch_size}: {result.latency_ms.warning}"
            )
        if result.conditions is not None and (why := unsteady(result.conditions)):
            err.print(f"[yellow]warning[/] batch size {result.batch_size}: {escape(why)}")
        for level, run in result.levels.items():
            if run.dropped:  # the trace of that run lacks them: say so, do not hide it
                err.print(
                    f"[yellow]warning[/] batch size {result.batch_size}, {level} run: the "
                    f"profiler dropped {run.dropped} records; its spans are incomplete"
                )
        if result.input_copy:
            copy = result.input_copy
            out.print(
                f"batch size {result.batch_size}: input copy {copy.bytes / 1e6:.1f} MB in "
                f"{copy.latency_ms['p50']:.3f} ms ({copy.gb_per_s:.1f} GB/s host to device)"
            )
        if result.launch_bound is not None:
            bound = (
                "launch-bound: the device waits on the host"
                if result.launch_bound
                else "the device's work outlasts the launch"
            )
            device = (
                f"; the device's work alone {result.device_ms['p50']:.3f} ms"
                if result.device_ms
                else ""
            )
            out.print(
                f"batch size {result.batch_size}: the host launched each predict in "
                f"{result.launch_ms['p50']:.3f} of {result.latency_ms.p50:.3f} ms (p50): "  # type: ignore[index]
                f"{bound}{device}"
            )
        if result.generation:
            gen = result.generation
            per_token = gen.time_per_output_token_ms
            out.print(
                f"batch size {result.batch_size}: {gen.new_tokens} tokens generated; time to "
                f"first token {gen.time_to_first_token_ms.p50:.3f} ms, per output token "
                f"{f'{per_token.p50:.3f} ms' if per_token else '-'}, "
                f"{gen.tokens_per_second:.1f} tokens/s"
            )
    if record.accuracy:
        acc = record.accuracy
        named = f"{acc.dataset}@{acc.dataset_version}" if acc.dataset_version else acc.dataset
        sha = f", index sha256 {acc.dataset_sha256[:16]}" if acc.dataset_sha256 else ""
        out.print(f"accuracy on {named}: {acc.line()} ({acc.samples} samples{sha})")
    out.print(
        f"evaluation {record.id}  trace {record.trace_id or '-'}  "
        f"({record.span_count} spans, trace level {record.trace_level})"
    )


@contextmanager
def progress_bar(enabled: bool) -> Iterator[ProgressCallback | None]:
    """A live bar on a terminal's stderr; nothing where stderr is a log or a pipe (rich would
    still write a blank line there, in front of any error message)."""
    if not enabled or not err.is_terminal:
        yield None
        return
    # Here, not at the top: the listing commands never draw a bar (rich.progress is 12 ms).
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        tasks: dict[tuple[int, str], int] = {}

        def update(event: RunProgress) -> None:
            key = (event.batch_size, event.run)
            if key not in tasks:
                tasks[key] = bar.add_task(
                    f"batch {event.batch_size} {event.run}", total=event.target
                )
            bar.update(tasks[key], completed=min(event.done, event.target))

        yield update
