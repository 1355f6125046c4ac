"""``mlms db``: the evaluation index (SQL) beside the store, which stays the archive."""

from __future__ import annotations

import click

from mlms.cli.common_options import store_option
from mlms.cli.render import err, out


def _database_option(command):
    return click.option(
        "--database",
        envvar="MLMS_DATABASE",
        default=None,
        metavar="URL",
        help="postgresql://USER@HOST:PORT/NAME or sqlite:///PATH; default: SQLite beside a "
        "local store, else under $MLMS_HOME.",
    )(command)


@click.group()
def db() -> None:
    """The evaluation index: what listings filter and sort on, rebuilt from the store."""


@db.command()
@store_option
@_database_option
def rebuild(store: str | None, database: str | None) -> None:
    """Index every record (and sweep) in the store that the index lacks. Idempotent and
    resumable: run it again after a crash or over a new, empty database."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from mlms.database.connect import url_for
    from mlms.database.index import EvaluationIndex
    from mlms.database.keeper import rebuild as run
    from mlms.store.factory import store_from_url

    target = store_from_url(store)
    index = EvaluationIndex(url_for(target, database))
    columns = ["indexing", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("records", total=None)
        done = run(target, index, lambda n, total: bar.update(task, completed=n, total=total))
    out.print(
        f"{done.indexed} records indexed of {done.stored} in {target.url} "
        f"({done.stored - done.indexed - done.skipped} there already, {done.skipped} unreadable), "
        f"{done.sweeps} sweeps, in {done.seconds:.1f} s ({done.rate:,.0f} records/s), "
        f"into {index.shown_url}"
    )
    index.close()


@db.command()
@store_option
@_database_option
def status(store: str | None, database: str | None) -> None:
    """Where the index is and how many evaluations it holds."""
    from mlms.database.connect import url_for
    from mlms.database.index import EvaluationIndex
    from mlms.database.keeper import STORE_KEY
    from mlms.store.factory import store_from_url

    target = store_from_url(store)
    index = EvaluationIndex(url_for(target, database))
    built = index.get_state(STORE_KEY)
    source = f"rebuilt from {built}" if built else "never rebuilt: 'mlms db rebuild'"
    out.print(f"{index.shown_url}: {index.count()} evaluations indexed ({source})")
    index.close()
