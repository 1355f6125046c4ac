"""The analysis engine: span archives as DuckDB relations, analyses as named queries.

Why DuckDB: it scans Arrow tables and Parquet in place (no row objects), runs joins, window
functions and interval predicates in parallel in a few lines of SQL, spills instead of
failing when memory is short, and hands results back as Arrow or pandas. The archive is
already Parquet with typed columns (``mlms.tracer.archive``), so an analysis over a million
kernels is one statement, not a Python loop. Polars would do the joins as well; SQL keeps each
analysis readable as the question it answers and lets the views below be shared.

A ``Spans`` holds one or more traces (``trace_id`` tells them apart) and defines views the
analyses build on:

``layers``
    One row per layer execution: FRAMEWORK spans with a layer index, from each trace's
    *layer run*: the deepest run that recorded kernels when there is one (its layers carry
    their kernels and a critical-path latency, see below), else the shallowest run with layer
    spans (the framework-level run: the least profiler in the way). Columns: the span's own,
    plus ``model_span`` (the predict it belongs to), ``host_ns`` (its host interval),
    ``gpu_ns``, ``kernels``, ``gpu_end_ns`` and ``latency_ns``.
``gpu``
    GPU activities (kernels, copies, sets) of each trace's kernel run, each with ``layer_span``
    (the layer whose API call launched it, by CUPTI correlation id and then by containment,
    both already parent links in the archive; null outside every layer).
``predicts``
    MODEL spans of the layer run: one row per predict, with its batch size and duration.

Layer latency on a GPU (``mlms.tracer.join`` says why): a layer starts when both the host has
begun it and the device has finished the layer before, and ends when both its host work and its
last kernel are done. As a query: ``end = running max(max(host end, last kernel end))`` over
the thread's layers in host order, ``start = max(host start, previous end)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from mlms.store.base import ObjectStore
from mlms.tracer.archive import SCHEMA, read_table, upgrade
from mlms.tracer.levels import TraceLevel

FRAMEWORK, MODEL, API, HARDWARE = (
    int(TraceLevel.FRAMEWORK),
    int(TraceLevel.MODEL),
    int(TraceLevel.SYSTEM_LIBRARY),
    int(TraceLevel.HARDWARE),
)
GPU_KINDS = ("kernel", "memcpy", "memset")

_VIEWS = f"""
CREATE VIEW runs AS
SELECT trace_id,
       coalesce(max(run) FILTER (WHERE kind = 'kernel'),
                min(run) FILTER (WHERE level = {FRAMEWORK} AND layer_index IS NOT NULL))
           AS layer_run,
       max(run) FILTER (WHERE kind = 'kernel') AS kernel_run
FROM spans GROUP BY trace_id;

CREATE VIEW layer_spans AS
SELECT s.* FROM spans s JOIN runs r ON s.trace_id = r.trace_id AND s.run = r.layer_run
WHERE s.level = {FRAMEWORK} AND s.layer_index IS NOT NULL;

CREATE VIEW gpu_work AS
SELECT s.* FROM spans s JOIN runs r ON s.trace_id = r.trace_id AND s.run = r.kernel_run
WHERE s.level = {HARDWARE} AND s.kind IN {GPU_KINDS};

-- Each span of a kernel run under a layer, with that layer (the nearest layer above it).
CREATE VIEW layer_of AS
WITH RECURSIVE walk(trace_id, span_id, layer_span) AS (
    SELECT trace_id, span_id, span_id FROM layer_spans
    UNION ALL
    SELECT c.trace_id, c.span_id, w.layer_span
    FROM walk w JOIN spans c ON c.trace_id = w.trace_id AND c.parent_id = w.span_id
    WHERE c.level > {FRAMEWORK}
)
SELECT trace_id, span_id, layer_span FROM walk;

CREATE VIEW gpu AS
SELECT g.*, l.layer_span
FROM gpu_work g LEFT JOIN layer_of l ON l.trace_id = g.trace_id AND l.span_id = g.span_id;

CREATE VIEW layer_gpu AS
SELECT trace_id, layer_span, count(*) FILTER (WHERE kind = 'kernel') AS kernels,
       sum(end_ns - start_ns) AS gpu_ns, max(end_ns) AS gpu_end_ns
FROM gpu WHERE layer_span IS NOT NULL GROUP BY trace_id, layer_span;

CREATE VIEW layers AS
WITH joined AS (
    SELECT l.*, l.parent_id AS model_span, l.end_ns - l.start_ns AS host_ns,
           coalesce(g.kernels, 0) AS kernels, coalesce(g.gpu_ns, 0) AS gpu_ns, g.gpu_end_ns,
           greatest(l.end_ns, coalesce(g.gpu_end_ns, l.end_ns)) AS reach_ns
    FROM layer_spans l
    LEFT JOIN layer_gpu g ON g.trace_id = l.trace_id AND g.layer_span = l.span_id
), path AS (
    SELECT *,
           max(reach_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS path_end_ns,
           max(reach_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_ns
    FROM joined
    WINDOW w AS (PARTITION BY trace_id, thread ORDER BY start_ns, span_id)
)
SELECT p.* EXCLUDE (reach_ns, path_end_ns, previous_ns),
       CASE WHEN r.kernel_run IS NULL THEN p.host_ns
            ELSE p.path_end_ns - greatest(p.start_ns, coalesce(p.previous_ns, p.start_ns))
       END AS latency_ns
FROM path p JOIN runs r ON r.trace_id = p.trace_id;

CREATE VIEW predicts AS
SELECT s.trace_id, s.span_id, s.batch_size, s.end_ns - s.start_ns AS duration_ns, s.start_ns,
       s.end_ns
FROM spans s JOIN runs r ON s.trace_id = r.trace_id AND s.run = r.layer_run
WHERE s.level = {MODEL};
"""


class Spans:
    """One or more traces' spans, queryable by the analyses (module docstring)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = upgrade(table)
        self._connection = duckdb.connect(config={"preserve_insertion_order": False})
        self._connection.register("spans", self.table)
        self._connection.execute(_VIEWS)

    @classmethod
    def from_tables(cls, tables: Iterable[pa.Table]) -> Spans:
        tables = [upgrade(t) for t in tables]
        return cls(pa.concat_tables(tables) if tables else SCHEMA.empty_table())

    @classmethod
    def from_store(cls, store: ObjectStore, trace_ids: Sequence[str]) -> Spans:
        return cls.from_tables(read_table(store, trace_id) for trace_id in trace_ids)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Spans:
        return cls(pa.Table.from_pandas(frame, preserve_index=False))

    def __len__(self) -> int:
        return self.table.num_rows

    def frame(self, sql: str, parameters: Sequence[Any] | None = None) -> pd.DataFrame:
        """The result of a query over the views as a DataFrame."""
        return self._connection.execute(sql, parameters or []).df()

    def arrow(self, sql: str, parameters: Sequence[Any] | None = None) -> pa.Table:
        return self._connection.execute(sql, parameters or []).arrow()

    def scalar(self, sql: str, parameters: Sequence[Any] | None = None) -> Any:
        row = self._connection.execute(sql, parameters or []).fetchone()
        return row[0] if row else None

    def has(self, view: str) -> bool:
        """Whether ``view`` (layers, gpu, predicts) has any row."""
        return bool(self.scalar(f"SELECT count(*) > 0 FROM (SELECT 1 FROM {view} LIMIT 1)"))
