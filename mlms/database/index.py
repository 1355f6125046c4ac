"""The evaluation index: claims (first writer wins), bulk adds, pages of summaries, views.

Thread-safe: every call takes a pooled connection of its own. Every database failure leaves
as an mlms error naming the database (``connect.errors``).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    and_,
    delete,
    func,
    insert,
    literal,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError

from mlms.database import connect
from mlms.database.rows import evaluation_row, result_rows, summary_of, utc_naive
from mlms.database.schema import evaluations, results, state, sweep_cells
from mlms.errors import InvalidArgument
from mlms.evaluation.query import EvaluationPage, EvaluationQuery, P50Row
from mlms.evaluation.query_terms import VIEWS

if TYPE_CHECKING:
    from mlms.evaluation.record import EvaluationRecord

#: Ids per ``IN (...)`` list (SQLite allows 32,766 parameters; PostgreSQL 65,535).
CHUNK = 500
#: Rows a view returns at most.
MAX_VIEW_ROWS = 10_000
#: The state key of a value that every write of the index changes (in its transaction): what
#: was read while it held one value is still the answer while it holds it.
GENERATION_KEY = "generation"
#: The state key set once a rebuild from the store has gone through (``keeper.rebuild``).
REBUILT_KEY = "rebuilt"
#: Where rows without a value sort among numbers (p50, throughput are never negative).
_NO_NUMBER = -1.0
_SORT_COLUMNS = {
    "created": evaluations.c.created_at,
    "p50": func.coalesce(evaluations.c.p50_ms, _NO_NUMBER),
    "throughput": func.coalesce(evaluations.c.throughput, _NO_NUMBER),
    "accuracy": evaluations.c.accuracy_order,
    "model": evaluations.c.model,
    "framework": evaluations.c.framework,
}


class EvaluationIndex:
    def __init__(self, url: str | None = None) -> None:
        """Opens (and creates or upgrades) the database at ``url`` (``connect.database_url``
        says the default)."""
        self.url = connect.database_url(url)
        self.engine = connect.create(self.url)
        with connect.errors(self.url):
            #: True when this call made the schema: the index has yet to learn the store.
            self.created = connect.migrate(self.engine)
        if self.generation() is None:  # a database made before generations were kept
            try:
                with connect.errors(self.url), self.engine.begin() as connection:
                    connection.execute(insert(state), [{"key": GENERATION_KEY, "value": _new()}])
            except IntegrityError:  # another process made it meanwhile
                pass

    @property
    def shown_url(self) -> str:
        return connect.shown(self.url)

    def close(self) -> None:
        self.engine.dispose()

    # -- writes ------------------------------------------------------------------------------

    def claim(self, record: EvaluationRecord) -> bool:
        """Index ``record`` unless its id is indexed already: False then (the first writer of
        an id wins; the database's primary key decides, whatever the race)."""
        return self._insert([evaluation_row(record)], result_rows(record))

    def _insert(self, rows: list[dict[str, Any]], batch_rows: list[dict[str, Any]]) -> bool:
        """Both kinds of rows in one transaction; False when an id is indexed already."""
        try:
            with connect.errors(self.url), self.engine.begin() as connection:
                connection.execute(insert(evaluations), rows)
                if batch_rows:
                    connection.execute(insert(results), batch_rows)
                _changed(connection)
        except IntegrityError:
            return False
        return True

    def add(self, records: Sequence[EvaluationRecord]) -> int:
        """Index those of ``records`` not indexed yet, in one transaction; how many were new."""
        return self.add_rows(
            [evaluation_row(r) for r in records], [row for r in records for row in result_rows(r)]
        )

    def add_rows(self, rows: list[dict[str, Any]], batch_rows: list[dict[str, Any]]) -> int:
        """``add`` for rows made already (``mlms.database.rows``): a rebuild's processes make
        them from the records they read."""
        fresh = {row["id"]: row for row in rows}
        for known in self.present(list(fresh)):
            fresh.pop(known)
        if not fresh:
            return 0
        results_of: dict[str, list[dict[str, Any]]] = {}
        for row in batch_rows:
            if row["evaluation_id"] in fresh:
                results_of.setdefault(row["evaluation_id"], []).append(row)
        every = [row for rows_of in results_of.values() for row in rows_of]
        if self._insert(list(fresh.values()), every):
            return len(fresh)
        # Another writer indexed some meanwhile: one evaluation at a time then.
        return sum(self._insert([row], results_of.get(key, [])) for key, row in fresh.items())

    def add_sweep(self, sweep_id: str, evaluation_ids: Iterable[str]) -> None:
        """Remember which evaluations a sweep holds (its cells' ids, before they run)."""
        wanted = set(evaluation_ids) - self._sweep_cells(sweep_id)
        if not wanted:
            return
        rows = [{"sweep_id": sweep_id, "evaluation_id": i} for i in sorted(wanted)]
        try:
            with connect.errors(self.url), self.engine.begin() as connection:
                connection.execute(insert(sweep_cells), rows)
                _changed(connection)
        except IntegrityError:  # the same sweep registered by another process meanwhile
            return

    def _sweep_cells(self, sweep_id: str) -> set[str]:
        query = select(sweep_cells.c.evaluation_id).where(sweep_cells.c.sweep_id == sweep_id)
        with connect.errors(self.url), self.engine.connect() as connection:
            return set(connection.execute(query).scalars())

    def get_state(self, key: str) -> str | None:
        with connect.errors(self.url), self.engine.connect() as connection:
            return connection.execute(select(state.c.value).where(state.c.key == key)).scalar()

    def set_state(self, key: str, value: str) -> None:
        with connect.errors(self.url), self.engine.begin() as connection:
            changed = connection.execute(
                update(state).where(state.c.key == key).values(value=value)
            ).rowcount
            if not changed:
                try:
                    with connection.begin_nested():
                        connection.execute(insert(state), [{"key": key, "value": value}])
                except IntegrityError:
                    connection.execute(update(state).where(state.c.key == key).values(value=value))

    def analyze(self) -> None:
        """Refresh the planner's statistics (after a bulk load: its plans follow the rows)."""
        with connect.errors(self.url), self.engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE")

    def forget(self, evaluation_id: str) -> None:
        """Drop an id that was claimed but whose record could not be stored."""
        with connect.errors(self.url), self.engine.begin() as connection:
            connection.execute(delete(results).where(results.c.evaluation_id == evaluation_id))
            connection.execute(delete(evaluations).where(evaluations.c.id == evaluation_id))
            _changed(connection)

    # -- reads -------------------------------------------------------------------------------

    def generation(self) -> str | None:
        """A value that changes with every write of the index (by any process of this
        version): a page read while it held one value is still the page while it holds it.
        None where no writer keeps one."""
        return self.get_state(GENERATION_KEY)

    def present(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that are indexed."""
        found: set[str] = set()
        with connect.errors(self.url), self.engine.connect() as connection:
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start : start + CHUNK]
                query = select(evaluations.c.id).where(evaluations.c.id.in_(chunk))
                found.update(connection.execute(query).scalars())
        return found

    def count(self) -> int:
        with connect.errors(self.url), self.engine.connect() as connection:
            return connection.execute(select(func.count()).select_from(evaluations)).scalar_one()

    def resolve(self, prefix: str) -> list[str]:
        """Ids starting with ``prefix`` (lower-case hex), two at most: one means unique."""
        query = (
            select(evaluations.c.id)
            .where(evaluations.c.id >= prefix, evaluations.c.id < prefix + "g")
            .order_by(evaluations.c.id)
            .limit(2)
        )
        with connect.errors(self.url), self.engine.connect() as connection:
            return list(connection.execute(query).scalars())

    def page(self, query: EvaluationQuery) -> EvaluationPage:
        """One page of the evaluations matching ``query``, in its order."""
        where = _filters(query)
        descending = query.sort.startswith("-")
        key = _SORT_COLUMNS[query.sort.removeprefix("-")]
        order = [key.desc(), evaluations.c.id.desc()] if descending else [key, evaluations.c.id]
        rows_query = select(evaluations, key.label("sort_key")).where(*where).order_by(*order)
        if query.page_token:
            after = _after(query)
            pair = tuple_(key, evaluations.c.id)
            rows_query = rows_query.where(pair < after if descending else pair > after)
        rows_query = rows_query.limit(query.page_size + 1)
        total_query = select(func.count()).select_from(evaluations).where(*where)
        with connect.errors(self.url), self.engine.connect() as connection:
            rows = connection.execute(rows_query).mappings().all()
            total = connection.execute(total_query).scalar_one()
        token = ""
        if len(rows) > query.page_size:
            rows = rows[: query.page_size]
            last = rows[-1]
            token = _token(query, last["sort_key"], last["id"])
        return EvaluationPage(
            summaries=[summary_of(row) for row in rows], total=total, next_page_token=token
        )

    def view(self, name: str, query: EvaluationQuery) -> list[P50Row]:
        """A named view over the completed evaluations that match ``query``'s filters:
        ``best_p50`` (the lowest p50 per model, hardware and batch size, and which framework
        version measured it) or ``framework_versions`` (per framework version too: how a
        model's p50 moved from one version to the next)."""
        if name not in VIEWS:
            raise InvalidArgument(f"view {name!r}: expected one of {', '.join(VIEWS)}")
        e, r = evaluations, results
        group = [e.c.model, e.c.hw, r.c.batch_size]
        if name == "framework_versions":
            group = [e.c.model, e.c.hw, e.c.framework, e.c.framework_version, r.c.batch_size]
        inner = (
            select(
                e.c.model,
                e.c.hw,
                e.c.framework,
                e.c.framework_version,
                r.c.batch_size,
                r.c.p50_ms,
                e.c.id.label("evaluation_id"),
                func.row_number()
                .over(partition_by=group, order_by=[r.c.p50_ms, e.c.id])
                .label("rank"),
                func.count().over(partition_by=group).label("evaluations"),
                func.avg(r.c.p50_ms).over(partition_by=group).label("mean_p50_ms"),
                func.max(e.c.created_at).over(partition_by=group).label("latest"),
            )
            .select_from(e.join(r, r.c.evaluation_id == e.c.id))
            .where(e.c.status == "completed", *_filters(query))
            .subquery()
        )
        ordered = [inner.c.model, inner.c.hw, inner.c.batch_size]
        if name == "framework_versions":
            ordered = [inner.c.model, inner.c.hw, inner.c.batch_size, inner.c.framework,
                       inner.c.latest]  # fmt: skip
        outer = (
            select(inner).where(inner.c.rank == literal(1)).order_by(*ordered).limit(MAX_VIEW_ROWS)
        )
        with connect.errors(self.url), self.engine.connect() as connection:
            rows = connection.execute(outer).mappings().all()
        return [
            P50Row(
                **{k: row[k] for k in P50Row.model_fields if k != "latest"},
                latest=row["latest"].replace(tzinfo=UTC),
            )
            for row in rows
        ]


def _changed(connection) -> None:
    """A new generation, in the transaction of the write (writers of one database take turns
    on its row, the last step of each write)."""
    connection.execute(update(state).where(state.c.key == GENERATION_KEY).values(value=_new()))


def _new() -> str:
    return uuid.uuid4().hex


def needs_rebuild(index: EvaluationIndex) -> bool:
    """True until a rebuild has gone through once (a new database over an existing store)."""
    return index.get_state(REBUILT_KEY) is None


def _filters(query: EvaluationQuery) -> list[ColumnElement[bool]]:
    e = evaluations
    where: list[ColumnElement[bool]] = []
    for column, value in (
        (e.c.model, query.model),
        (e.c.framework, query.framework),
        (e.c.hw, query.hardware),
        (e.c.precision, query.precision),
        (e.c.task, query.task),
        (e.c.status, query.status),
    ):
        if value:
            where.append(column == value)
    if query.since is not None:
        where.append(e.c.created_at >= utc_naive(query.since))
    if query.until is not None:
        where.append(e.c.created_at <= utc_naive(query.until))
    if query.sweep_id:
        cells = select(sweep_cells.c.evaluation_id).where(sweep_cells.c.sweep_id == query.sweep_id)
        where.append(e.c.id.in_(cells))
    for word in query.words():
        escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append(e.c.search.like(f"%{escaped}%", escape="\\"))
    return [and_(*where)] if where else []


def _token(query: EvaluationQuery, key: Any, evaluation_id: str) -> str:
    value = key.isoformat() if isinstance(key, datetime) else key
    payload = json.dumps([query.fingerprint(), value, evaluation_id]).encode()
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def _after(query: EvaluationQuery) -> tuple[Any, str]:
    """The (sort key, id) a page token says the previous page ended at."""
    bad = InvalidArgument(
        f"page token {query.page_token[:40]!r}: expected the next_page_token of a listing "
        "with the same filters and order"
    )
    try:
        padded = query.page_token + "=" * (-len(query.page_token) % 4)
        fingerprint, value, evaluation_id = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, TypeError):
        raise bad from None
    if fingerprint != query.fingerprint() or not isinstance(evaluation_id, str):
        raise bad
    sort = query.sort.removeprefix("-")
    try:
        if sort == "created":
            value = datetime.fromisoformat(value)
        elif sort in ("p50", "throughput", "accuracy"):
            value = float(value)
        elif not isinstance(value, str):
            raise bad
    except (ValueError, TypeError):
        raise bad from None
    return value, evaluation_id


__all__ = ["REBUILT_KEY", "EvaluationIndex", "needs_rebuild"]
