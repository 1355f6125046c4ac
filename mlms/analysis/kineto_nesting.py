"""Who is inside whom in an imported Kineto trace: parents, steps and layer order, as queries.

Kineto records intervals, not a tree. The tree is rebuilt the way ``mlms.tracer.hierarchy``
does for mlms's own runs: a span's parent is the innermost span of the right kind around it on
its thread, and a GPU activity's is the API call with its correlation id. Over millions of
spans this is three DuckDB statements per thread stream, not a Python sweep: the starts (+1)
and ends (-1) of the intervals, sorted by thread and time, give each span its depth (the
intervals open when it starts) as a running sum, and its parent is the latest container start
one level up (an ASOF join).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from mlms.tracer.levels import TraceLevel

APPLICATION, MODEL, FRAMEWORK, API, HARDWARE = (
    int(TraceLevel.APPLICATION),
    int(TraceLevel.MODEL),
    int(TraceLevel.FRAMEWORK),
    int(TraceLevel.SYSTEM_LIBRARY),
    int(TraceLevel.HARDWARE),
)


def span_links(connection: duckdb.DuckDBPyConnection, spans: pa.Table) -> pa.Table:
    """(seq, parent_seq, step_seq, layer_index) for the spans (seq, level, pid, tid, start_ns,
    end_ns, correlation_id) that have any: each span's parent, the ProfilerStep it lies in
    and, for a step's top-level ops, their order in the step from 0.

    Parents: an op's is the innermost op or step around it; an API call's, the innermost op
    (else step) around it; an annotation's (steps too), the innermost annotation around it; a
    GPU activity's, the API call with its correlation id (the first, if several)."""
    connection.register("spans", spans)
    _nesting(
        connection,
        "host",
        containers=f"level IN ({MODEL}, {FRAMEWORK})",
        probes=f"level = {API}",
        kept=f"level IN ({FRAMEWORK}, {API})",
    )
    _nesting(
        connection,
        "annotations",
        containers=f"level IN ({APPLICATION}, {MODEL})",
        probes="false",
        kept="true",
    )
    links = connection.sql(
        f"""
        WITH api AS (
            SELECT correlation_id, min(seq) AS seq FROM spans
            WHERE level = {API} AND correlation_id IS NOT NULL GROUP BY correlation_id
        ), layers AS (
            SELECT seq, row_number() OVER (PARTITION BY step_seq ORDER BY place) - 1
                AS layer_index
            FROM host WHERE level = {FRAMEWORK} AND parent_seq = step_seq
        )
        SELECT h.seq, h.parent_seq, h.step_seq, l.layer_index
        FROM host h LEFT JOIN layers l USING (seq)
        UNION ALL
        SELECT seq, parent_seq, step_seq, NULL FROM annotations
        UNION ALL
        SELECT g.seq, a.seq, h.step_seq, NULL
        FROM spans g JOIN api a USING (correlation_id) LEFT JOIN host h ON h.seq = a.seq
        WHERE g.level = {HARDWARE}
        """
    ).to_arrow_table()
    connection.execute("DROP TABLE host; DROP TABLE annotations")
    connection.unregister("spans")
    return links


def _nesting(
    connection: duckdb.DuckDBPyConnection, name: str, *, containers: str, probes: str, kept: str
) -> None:
    """Table ``name`` (seq, level, place, parent_seq, step_seq) for the ``kept`` spans among
    ``containers`` and ``probes``: the innermost container around each on its thread (pid,
    tid), the ProfilerStep it lies in, and its place in time order. Every interval ends within
    its thread's rows, so the running sums need no partition (one streaming pass)."""
    connection.execute(
        f"""
        CREATE TEMP TABLE points AS
        SELECT * FROM (
            SELECT pid, tid, seq, level, start_ns AS instant,
                   CASE WHEN {probes} THEN 2 ELSE 1 END::TINYINT AS tie, -end_ns AS longer
            FROM spans WHERE {containers} OR {probes}
            UNION ALL
            SELECT pid, tid, seq, level, end_ns,
                   CASE WHEN end_ns > start_ns THEN 0 ELSE 3 END::TINYINT, 0
            FROM spans WHERE {containers}
        )
        -- At one instant: ends of intervals (tie 0) first, then starts of containers (1: the
        -- longer first, then the higher level), then probes (2), then ends of empty ones (3).
        ORDER BY pid, tid, instant, tie, longer, level, seq
        """
    )
    connection.execute(
        f"""
        CREATE TEMP TABLE starts AS
        SELECT * FROM (
            SELECT rowid AS place, seq, level, pid, tid, tie, -longer AS end_ns,
                   sum(CASE tie WHEN 1 THEN 1 WHEN 2 THEN 0 ELSE -1 END)
                       OVER (ROWS UNBOUNDED PRECEDING) - (tie = 1)::INTEGER AS depth,
                   max(CASE WHEN tie = 1 AND level = {MODEL} THEN rowid END)
                       OVER (ROWS UNBOUNDED PRECEDING) AS step_place
            FROM points
        ) WHERE tie IN (1, 2)
        """
    )
    connection.execute(
        f"""
        CREATE TEMP TABLE {name} AS
        SELECT s.seq, s.level, s.place, c.seq AS parent_seq,
               CASE WHEN step.pid = s.pid AND step.tid = s.tid AND s.end_ns <= step.end_ns
                    THEN step.seq END AS step_seq
        FROM (SELECT * FROM starts WHERE {kept}) s
        ASOF LEFT JOIN (SELECT place, seq, depth FROM starts WHERE tie = 1) c
            ON c.depth = s.depth - 1 AND c.place < s.place
        LEFT JOIN (SELECT place, seq, pid, tid, end_ns FROM starts WHERE level = {MODEL}) step
            ON step.place = s.step_place
        """
    )
    connection.execute("DROP TABLE points; DROP TABLE starts")
