"""The analysis engine: span archives as DuckDB relations, analyses as named queries.

Why DuckDB: it scans Arrow tables and Parquet in place (no row objects), runs joins, window
functions and interval predicates in parallel in a few lines of SQL, spills instead of
failing when memory is short, and hands results back as Arrow or pandas. The archive is
already Parquet with typed columns (``mlms.tracer.archive``), so an analysis over a million
kernels is one statement, not a Python loop. Polars would do the joins as well; SQL keeps each
analysis readable as the question it answers and lets the tables below be shared.

A ``Spans`` holds one or more traces (``trace_id`` tells them apart) as the relation ``spans``
and derives, once, the tables the analyses build on:

``layers``
    One row per layer execution: FRAMEWORK spans with a layer index, from each trace's
    *layer run*: the deepest run that recorded kernels when there is one (its layers carry
    their kernels and a critical-path latency, see below), else the shallowest run with layer
    spans (the framework-level run: the least profiler in the way). Columns: the span's own,
    plus ``model_span`` (the predict it belongs to), ``host_ns`` (its host interval),
    ``gpu_ns``, ``kernels``, ``gpu_end_ns`` and ``latency_ns``.
``gpu``
    GPU activities (kernels, copies, sets) of each trace's kernel run, each with ``layer``
    (the ``id`` of the layer whose API call launched it, by CUPTI correlation id and then by
    containment, both already parent links in the archive; null outside every layer) and
    ``name_id`` (its name in ``kernel_names``).
``layer_spans``
    The layer spans themselves (``layers`` without the join), with their ``id`` key.
``runs``
    Per trace: its layer run and its kernel run (null without kernels).
``kernel_names``
    ``name_id``, each GPU activity's ``name`` and its short, demangled form ``kernel``
    (``short_kernel_name``).
``predicts``
    MODEL spans of the layer run: one row per predict, with its batch size, duration and rank.

A GPU activity's layer is found by walking up its parent links (its API call, then any
operators an imported trace nests) one level per query, over the activities not yet placed,
until each reaches a layer or its predict: a few joins, however many kernels.

Layer latency on a GPU (``mlms.tracer.join`` says why): a layer starts when both the host has
begun it and the device has finished the layer before, and ends when both its host work and its
last kernel are done. As a query: ``end = running max(max(host end, last kernel end))`` over
the thread's layers in host order, ``start = max(host start, previous end)``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mlms.analysis.names import short_kernel_name
from mlms.store.base import ObjectStore
from mlms.tracer.archive import SCHEMA, TYPED_COLUMNS, local_archive, read_parquet, upgrade
from mlms.tracer.communication import KERNEL_KINDS
from mlms.tracer.levels import TraceLevel

FRAMEWORK, MODEL, API, HARDWARE = (
    int(TraceLevel.FRAMEWORK),
    int(TraceLevel.MODEL),
    int(TraceLevel.SYSTEM_LIBRARY),
    int(TraceLevel.HARDWARE),
)
GPU_KINDS = (*KERNEL_KINDS, "memcpy", "memset")
# Communication is a kind of host ops too: a kernel is one at the hardware level.
_KERNEL = f"level = {HARDWARE} AND kind IN {KERNEL_KINDS}"
#: DuckDB spills what does not fit instead of growing past this.
MEMORY_LIMIT = "1500MB"
#: Parent links walked up from a GPU activity before giving up on finding its layer.
MAX_DEPTH = 64

_GPU_COLUMNS = ", ".join(
    f"s.{column}"
    for column in (
        "trace_id", "kind", "start_ns", "end_ns", "device", "stream", "batch_size",
        "counter_duration_ns", "counter_flops", "counter_tensor_flops", "dram_read_bytes",
        "dram_write_bytes", "occupancy_pct", "bound", "rank", "collective_bytes", "group_size",
    )
)  # fmt: skip
_IN_KERNEL_RUN = "FROM spans s JOIN runs r ON s.trace_id = r.trace_id AND s.run = r.kernel_run"
_GPU_WORK = f"s.level = {HARDWARE} AND s.kind IN {GPU_KINDS}"
# Joins run on 64-bit keys: ``hash`` of the span ids (random 64-bit values already; two of a
# few million colliding has odds of about one in a million million).
_KEY = "hash({})"

_RUNS = f"""
CREATE TEMP TABLE runs AS
SELECT trace_id,
       coalesce(max(run) FILTER (WHERE {_KERNEL}),
                min(run) FILTER (WHERE level = {FRAMEWORK} AND layer_index IS NOT NULL))
           AS layer_run,
       max(run) FILTER (WHERE {_KERNEL}) AS kernel_run
FROM spans WHERE level IN ({FRAMEWORK}, {HARDWARE}) GROUP BY trace_id
"""
_LAYER_SPANS = f"""
CREATE TEMP TABLE layer_spans AS
SELECT {_KEY.format("s.span_id")} AS id, s.trace_id, s.parent_id, s.name, s.kind, s.op_type,
       s.layer_index, s.batch_size, s.start_ns, s.end_ns, s.thread, s.params, s.flops,
       s.activation_bytes, s.allocated_bytes
FROM spans s JOIN runs r ON s.trace_id = r.trace_id AND s.run = r.layer_run
WHERE s.level = {FRAMEWORK} AND s.layer_index IS NOT NULL
"""
_KERNEL_NAMES = f"""
CREATE TEMP TABLE kernel_names AS
SELECT DISTINCT {_KEY.format("s.name")} AS name_id, s.name, NULL::VARCHAR AS kernel
{_IN_KERNEL_RUN} WHERE {_GPU_WORK}
"""
# The walk needs only keys; the GPU work's other columns are read once, at the end.
_WALK_START = (
    f"CREATE TEMP TABLE above AS SELECT {_KEY.format('s.span_id')} AS id, "
    f"{_KEY.format('s.parent_id')} AS parent, "
    f"s.level = {FRAMEWORK} AND s.layer_index IS NOT NULL AS is_layer {_IN_KERNEL_RUN} "
    f"WHERE s.level BETWEEN {FRAMEWORK} AND {API}",
    "CREATE TEMP TABLE placed (id UBIGINT, layer UBIGINT)",
    f"CREATE TEMP TABLE frontier AS SELECT {_KEY.format('s.span_id')} AS id, "
    f"{_KEY.format('s.parent_id')} AS cursor {_IN_KERNEL_RUN} WHERE {_GPU_WORK}",
)
_WALK_STEP = (
    "CREATE OR REPLACE TEMP TABLE step AS "
    "SELECT f.id, a.is_layer, a.id AS hit, a.parent AS next "
    "FROM frontier f JOIN above a ON a.id = f.cursor",
    "INSERT INTO placed SELECT id, hit FROM step WHERE is_layer",
    "CREATE OR REPLACE TEMP TABLE frontier AS SELECT id, next AS cursor "
    "FROM step WHERE NOT is_layer AND next IS NOT NULL",
)
_WALK_END = (
    f"CREATE TEMP TABLE gpu AS SELECT {_KEY.format('s.span_id')} AS id, "
    f"{_KEY.format('s.name')} AS name_id, {_GPU_COLUMNS}, p.layer {_IN_KERNEL_RUN} "
    f"LEFT JOIN placed p ON p.id = {_KEY.format('s.span_id')} WHERE {_GPU_WORK}",
    "DROP TABLE above; DROP TABLE placed; DROP TABLE frontier; DROP TABLE IF EXISTS step",
)
_LAYERS = (
    f"""
    CREATE TEMP TABLE layer_gpu AS
    SELECT layer, count(*) FILTER (WHERE kind IN {KERNEL_KINDS}) AS kernels,
           sum(end_ns - start_ns) AS gpu_ns, max(end_ns) AS gpu_end_ns
    FROM gpu WHERE layer IS NOT NULL GROUP BY layer
    """,
    # The critical path over a narrow projection: windows sort only what they need.
    """
    CREATE TEMP TABLE layer_path AS
    WITH reach AS (
        SELECT l.trace_id, l.thread, l.id, l.start_ns,
               greatest(l.end_ns, coalesce(g.gpu_end_ns, l.end_ns)) AS reach_ns
        FROM layer_spans l LEFT JOIN layer_gpu g ON g.layer = l.id
    )
    SELECT id,
           max(reach_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS path_end_ns,
           max(reach_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_ns
    FROM reach
    WINDOW w AS (PARTITION BY trace_id, thread ORDER BY start_ns, id)
    """,
    """
    CREATE TEMP TABLE layers AS
    SELECT l.*, l.parent_id AS model_span, l.end_ns - l.start_ns AS host_ns,
           coalesce(g.kernels, 0) AS kernels, coalesce(g.gpu_ns, 0) AS gpu_ns, g.gpu_end_ns,
           CASE WHEN r.kernel_run IS NULL THEN l.end_ns - l.start_ns
                ELSE p.path_end_ns - greatest(l.start_ns, coalesce(p.previous_ns, l.start_ns))
           END AS latency_ns
    FROM layer_spans l
    JOIN runs r ON r.trace_id = l.trace_id
    JOIN layer_path p ON p.id = l.id
    LEFT JOIN layer_gpu g ON g.layer = l.id
    """,
    "DROP TABLE layer_gpu; DROP TABLE layer_path; DROP TABLE layer_spans",
    "CREATE TEMP VIEW layer_spans AS SELECT * EXCLUDE (model_span, host_ns, kernels, gpu_ns, "
    "gpu_end_ns, latency_ns) FROM layers",
)
_PREDICTS = f"""
CREATE TEMP TABLE predicts AS
SELECT s.trace_id, s.span_id, s.batch_size, s.end_ns - s.start_ns AS duration_ns,
       s.start_ns, s.end_ns, s.rank
FROM spans s JOIN runs r ON s.trace_id = r.trace_id AND s.run = r.layer_run
WHERE s.level = {MODEL}
"""


class Spans:
    """One or more traces' spans, queryable by the analyses (module docstring)."""

    def __init__(self, table: pa.Table) -> None:
        self.table: pa.Table | None = upgrade(table)
        self._derived: set[str] = set()
        self._connection = _connect()
        self._connection.register("spans", self.table)
        self._derive()

    @classmethod
    def from_tables(cls, tables: Iterable[pa.Table]) -> Spans:
        tables = [upgrade(t) for t in tables]
        return cls(pa.concat_tables(tables) if tables else SCHEMA.empty_table())

    @classmethod
    def from_parquet(cls, paths: Sequence[Path]) -> Spans:
        """Archives in Parquet files, scanned in place: only the columns and rows each derived
        table needs are read, never the whole archive into memory. A path given twice counts
        once."""
        paths = list(dict.fromkeys(paths))
        typed = {column.name for column in TYPED_COLUMNS}
        if not paths or any(not typed <= set(pq.read_schema(p).names) for p in paths):
            return cls.from_tables(read_parquet(p) for p in paths)  # older archives: upgrade
        spans = cls.__new__(cls)
        spans.table = None
        spans._derived = set()
        spans._connection = _connect()
        files = ", ".join(f"'{_quoted(p)}'" for p in paths)
        spans._connection.sql(f"CREATE VIEW spans AS SELECT * FROM read_parquet([{files}])")
        spans._derive()
        return spans

    @classmethod
    def from_store(cls, store: ObjectStore, trace_ids: Sequence[str]) -> Spans:
        return cls.from_parquet([local_archive(store, trace_id) for trace_id in trace_ids])

    def __len__(self) -> int:
        return int(self.scalar("SELECT count(*) FROM spans"))

    def frame(self, sql: str, parameters: Sequence[Any] | None = None) -> pd.DataFrame:
        """The result of a query over the tables as a DataFrame (through Arrow: strings stay
        Arrow strings, no Python object per value)."""
        return self.arrow(sql, parameters).to_pandas()

    def arrow(self, sql: str, parameters: Sequence[Any] | None = None) -> pa.Table:
        return self._connection.sql(sql, params=parameters).to_arrow_table()

    def derive(self, name: str, query: str) -> str:
        """``name``: a temporary table of ``query``'s rows, made the first time it is asked
        for (a table that several analyses build on, computed once)."""
        if name not in self._derived:
            self._connection.sql(f"CREATE TEMP TABLE {name} AS {query}")
            self._derived.add(name)
        return name

    def scalar(self, sql: str, parameters: Sequence[Any] | None = None) -> Any:
        rows = self._connection.sql(sql, params=parameters).fetchall()
        return rows[0][0] if rows else None

    def _derive(self) -> None:
        sql = self._connection.sql
        for statement in (_RUNS, _LAYER_SPANS, _PREDICTS, _KERNEL_NAMES, *_WALK_START):
            sql(statement)
        for _ in range(MAX_DEPTH):
            for statement in _WALK_STEP:
                sql(statement)
            if not self.scalar("SELECT count(*) FROM frontier"):
                break
        for statement in (*_WALK_END, *_LAYERS):
            sql(statement)
        names = sql("SELECT name_id, name FROM kernel_names ORDER BY name").fetchall()
        short = pa.table(
            {
                "name_id": pa.array([name_id for name_id, _ in names], pa.uint64()),
                "kernel": _distinct_short_names([name for _, name in names]),
            }
        )
        self._connection.register("short_names", short)
        sql(
            "UPDATE kernel_names SET kernel = short_names.kernel FROM short_names "
            "WHERE kernel_names.name_id = short_names.name_id"
        )
        self._connection.unregister("short_names")


def _distinct_short_names(names: Sequence[str]) -> list[str]:
    """Short kernel names, numbered where several full names (template instances of one
    kernel) shorten to the same one: ``elementwise_kernel #1``, ``elementwise_kernel #2``."""
    short = [short_kernel_name(name) for name in names]
    shared = {name for name, count in Counter(short).items() if count > 1}
    seen: Counter[str] = Counter()
    result = []
    for name in short:
        if name in shared:
            seen[name] += 1
            name = f"{name} #{seen[name]}"
        result.append(name)
    return result


def _connect() -> duckdb.DuckDBPyConnection:
    # As many threads as the cores this process may run on: DuckDB counts the machine's
    # cores, and threads beyond the affinity mask (taskset, a container's cpuset) only contend.
    return duckdb.connect(
        config={
            "preserve_insertion_order": False,
            "memory_limit": MEMORY_LIMIT,
            "threads": len(os.sched_getaffinity(0)),
        }
    )


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")
