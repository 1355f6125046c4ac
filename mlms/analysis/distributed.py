"""Analyses across the ranks of one run: queries over the span table's ``rank`` column.

They answer HTA's questions (``TraceAnalysis.get_temporal_breakdown``,
``get_comm_comp_overlap``) and nccl-tests' (bus bandwidth) on mlms's own multi-rank traces and
on imported Kineto folders alike. A trace without ranks counts as rank 0.

What each rank did is its *activity* in the trace's activity run (the kernel run where the
trace has kernels, else the layer run; ``runs`` of ``mlms.analysis.engine``):

- With GPU work, the GPU activities, as HTA classes them: NCCL's kernels are communication,
  copies and sets (and kernels named ``...Memcpy...``, ``Memset...``) memory, kernels named
  ``...Sync...`` other, every other kernel compute.
- Without (a CPU run with gloo), the framework-level ops and every communication span of the
  host (c10d's ops, gloo's annotations on its own threads): communication, else compute;
  except the ops around a collective (DTensor's ``Redistribute``, the residual add whose input
  a row-parallel linear's all-reduce completes), which wait on it rather than compute.

The timeline of a rank is cut where any activity starts or ends; each piece belongs to the
first of its running categories in precedence order. On a GPU that is HTA's: compute first
(communication hidden under computation is not time lost), then communication, memory,
other. On the host, communication first. What no activity covers between a rank's first
start and last end is idle.
"""

from __future__ import annotations

import pandas as pd

from mlms.analysis.engine import FRAMEWORK, HARDWARE, Spans
from mlms.analysis.names import short_kernel_name
from mlms.tracer.communication import COMMUNICATION, bus_factor_sql, collective_sql

_RANK = "coalesce(s.rank, 0)"
_GPU_CATEGORY = f"""
    CASE WHEN g.kind = '{COMMUNICATION}' THEN 'communication'
         WHEN g.kind IN ('memcpy', 'memset') OR n.name LIKE '%Memcpy%' OR n.name LIKE 'Memset%'
             THEN 'memory'
         WHEN n.name LIKE '%Sync%' THEN 'other'
         ELSE 'compute' END"""
# Each trace's activity run, and whether its activity is the GPU's.
_ACTIVITY_RUNS = """
    activity_runs AS (
        SELECT trace_id, coalesce(kernel_run, layer_run) AS run, kernel_run IS NOT NULL AS gpu
        FROM runs
    )"""
# On the host, the ops around a collective on their thread (DTensor's Redistribute, the
# residual add whose input a row-parallel linear's all-reduce completes): they wait on it, so
# they are not computation; the other ops inside them still are.
_AROUND_COLLECTIVES = f"""
    host_ops AS (
        SELECT s.trace_id, s.run, s.span_id, coalesce(s.rank, 0) AS rank, s.thread, s.kind,
               s.start_ns, s.end_ns
        FROM activity_runs a JOIN spans s ON s.trace_id = a.trace_id AND s.run = a.run
        WHERE NOT a.gpu AND s.level = {FRAMEWORK}
    ),
    around_collectives AS (
        SELECT DISTINCT o.trace_id, o.span_id
        FROM host_ops o JOIN host_ops c
          ON c.trace_id = o.trace_id AND c.run = o.run AND c.thread = o.thread
         AND c.rank = o.rank AND c.start_ns >= o.start_ns AND c.end_ns <= o.end_ns
        WHERE c.kind = '{COMMUNICATION}' AND o.kind <> '{COMMUNICATION}'
    )"""
_ACTIVITY = f"""
    {_ACTIVITY_RUNS},
    {_AROUND_COLLECTIVES},
    activity AS (
        -- the GPU's: the engine's table of the kernel run's GPU activities
        SELECT g.trace_id, coalesce(g.rank, 0) AS rank, g.start_ns, g.end_ns, true AS gpu,
               {_GPU_CATEGORY} AS category, g.batch_size
        FROM gpu g JOIN kernel_names n USING (name_id)
        UNION ALL
        SELECT s.trace_id, {_RANK} AS rank, s.start_ns, s.end_ns, false AS gpu,
               CASE WHEN s.kind = '{COMMUNICATION}' THEN 'communication' ELSE 'compute' END,
               -- a span outside the predict's tree (gloo's work on gloo's threads): the
               -- batch size of the rank's predict it started in
               coalesce(s.batch_size,
                        CASE WHEN s.start_ns <= p.end_ns THEN p.batch_size END) AS batch_size
        FROM spans s JOIN activity_runs a ON s.trace_id = a.trace_id AND s.run = a.run
        ASOF LEFT JOIN predicts p
          ON s.batch_size IS NULL AND p.trace_id = s.trace_id
         AND coalesce(p.rank, 0) = {_RANK} AND p.start_ns <= s.start_ns
        ANTI JOIN around_collectives c ON c.trace_id = s.trace_id AND c.span_id = s.span_id
        WHERE NOT a.gpu AND (s.level = {FRAMEWORK}
                             OR (s.kind = '{COMMUNICATION}' AND s.level < {HARDWARE}))
    )"""
# The pieces of each rank's timeline between consecutive starts and ends, with how many
# activities of each category run in it.
_PIECES = f"""
    {_ACTIVITY},
    edges AS (
        SELECT trace_id, batch_size, rank, gpu, category, start_ns AS t_ns, 1 AS delta
        FROM activity
        UNION ALL
        SELECT trace_id, batch_size, rank, gpu, category, end_ns, -1 FROM activity
    ),
    steps AS (
        SELECT trace_id, batch_size, rank, any_value(gpu) AS gpu, t_ns,
               sum(delta) FILTER (WHERE category = 'compute') AS compute,
               sum(delta) FILTER (WHERE category = 'communication') AS communication,
               sum(delta) FILTER (WHERE category = 'memory') AS memory,
               sum(delta) FILTER (WHERE category = 'other') AS other
        FROM edges GROUP BY trace_id, batch_size, rank, t_ns
    ),
    running AS (
        SELECT trace_id, batch_size, rank, gpu, t_ns,
               lead(t_ns) OVER w - t_ns AS ns,
               sum(coalesce(compute, 0)) OVER w > 0 AS compute,
               sum(coalesce(communication, 0)) OVER w > 0 AS communication,
               sum(coalesce(memory, 0)) OVER w > 0 AS memory,
               sum(coalesce(other, 0)) OVER w > 0 AS other
        FROM steps
        WINDOW w AS (PARTITION BY trace_id, batch_size, rank ORDER BY t_ns
                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
    ),
    classified AS (
        SELECT *, CASE WHEN gpu THEN
                           CASE WHEN compute THEN 'compute' WHEN communication THEN 'communication'
                                WHEN memory THEN 'memory' WHEN other THEN 'other' END
                       ELSE CASE WHEN communication THEN 'communication'
                                 WHEN compute THEN 'compute' END
                  END AS category
        FROM running WHERE ns IS NOT NULL
    )
    SELECT * FROM classified"""
# The collectives each rank ran: NCCL's kernels on a GPU; on the host the outermost
# communication ops (a c10d op, not the record_param_comms inside it). ``launch_ns`` is when
# the host issued it (a kernel's launch call), which places it in an iteration.
_COLLECTIVES = f"""
    {_ACTIVITY_RUNS},
    collective_spans AS (
        -- A kernel's size where the trace has none (CUPTI records none): the tensor of the
        -- collective op that launched it (kernel -> launch call -> the op's layer span).
        SELECT s.trace_id, s.batch_size, {_RANK} AS rank, s.name, s.start_ns, s.end_ns,
               coalesce(s.collective_bytes,
                        CASE WHEN a.gpu AND o.kind = '{COMMUNICATION}'
                             THEN o.activation_bytes END) AS collective_bytes,
               s.group_size,
               CASE WHEN a.gpu THEN coalesce(p.start_ns, s.start_ns) ELSE s.start_ns END
                   AS launch_ns
        FROM spans s JOIN activity_runs a ON s.trace_id = a.trace_id AND s.run = a.run
        LEFT JOIN spans p ON p.span_id = s.parent_id AND p.trace_id = s.trace_id
        LEFT JOIN spans o ON o.span_id = p.parent_id AND o.trace_id = s.trace_id
        WHERE s.kind = '{COMMUNICATION}'
          AND ((a.gpu AND s.level = {HARDWARE})
               OR (NOT a.gpu AND s.level = {FRAMEWORK}
                   AND coalesce(p.kind, '') <> '{COMMUNICATION}'))
    )"""


def _pieces(spans: Spans) -> str:
    """The table of every rank's timeline pieces (made once per ``Spans``)."""
    return spans.derive("rank_pieces", f"WITH {_PIECES}")


def rank_breakdown(spans: Spans) -> pd.DataFrame:
    """Where does each rank's time go? Per trace, batch size and rank, HTA's temporal
    breakdown: the span of its activity (first start to last end) cut into compute,
    communication, memory (copies and sets), other and idle time, each also as a share of
    that span; non-compute is HTA's column (all but compute and idle)."""
    return spans.frame(
        f"""
        WITH per_rank AS (
            SELECT trace_id, batch_size, rank, any_value(gpu) AS gpu,
                   sum(ns) AS span_ns,  -- the pieces tile first start to last end
                   coalesce(sum(ns) FILTER (WHERE category = 'compute'), 0) AS compute_ns,
                   coalesce(sum(ns) FILTER (WHERE category = 'communication'), 0) AS comm_ns,
                   coalesce(sum(ns) FILTER (WHERE category = 'memory'), 0) AS memory_ns,
                   coalesce(sum(ns) FILTER (WHERE category = 'other'), 0) AS other_ns,
                   coalesce(sum(ns) FILTER (WHERE category IS NULL), 0) AS idle_ns
            FROM {_pieces(spans)} GROUP BY trace_id, batch_size, rank
        )
        SELECT trace_id, batch_size, rank, CASE WHEN gpu THEN 'gpu' ELSE 'host' END AS activity,
               compute_ns / 1e3 AS "compute (us)", comm_ns / 1e3 AS "communication (us)",
               memory_ns / 1e3 AS "memory (us)", other_ns / 1e3 AS "other (us)",
               idle_ns / 1e3 AS "idle (us)",
               (span_ns - compute_ns - idle_ns) / 1e3 AS "non-compute (us)",
               span_ns / 1e3 AS "span (us)",
               100 * compute_ns / nullif(span_ns, 0) AS "compute (%)",
               100 * comm_ns / nullif(span_ns, 0) AS "communication (%)",
               100 * memory_ns / nullif(span_ns, 0) AS "memory (%)",
               100 * other_ns / nullif(span_ns, 0) AS "other (%)",
               100 * idle_ns / nullif(span_ns, 0) AS "idle (%)"
        FROM per_rank ORDER BY trace_id, batch_size, rank
        """
    )


def comm_overlap(spans: Spans) -> pd.DataFrame:
    """How much of each rank's communication runs under computation? Per trace, batch size
    and rank: the time communication runs (its activities merged), the part of it during
    which computation runs too, and that share (HTA's ``get_comm_comp_overlap``)."""
    return spans.frame(
        f"""
        SELECT trace_id, batch_size, rank,
               coalesce(sum(ns) FILTER (WHERE communication), 0) / 1e3 AS "communication (us)",
               coalesce(sum(ns) FILTER (WHERE communication AND compute), 0) / 1e3
                   AS "overlapped (us)",
               100 * coalesce(sum(ns) FILTER (WHERE communication AND compute), 0)
                   / nullif(sum(ns) FILTER (WHERE communication), 0) AS "overlap (%)"
        FROM {_pieces(spans)} GROUP BY trace_id, batch_size, rank
        ORDER BY trace_id, batch_size, rank
        """
    )


def rank_skew(spans: Spans) -> pd.DataFrame:
    """Which rank holds each iteration up, and how long do the others wait for it? Per
    iteration (a predict, or a Kineto ProfilerStep; the n-th of each rank) and rank: its
    time, the slowest rank's, how far behind it this rank finished, its collectives' time,
    and its wait in them: over the iteration's collectives, matched across ranks by order,
    how long after this rank the last one arrived (a collective completes only when every
    rank has joined it), at most as long as the collective ran on this rank."""
    return spans.frame(
        f"""
        WITH {_COLLECTIVES},
        iterations AS (
            SELECT trace_id, batch_size, coalesce(rank, 0) AS rank, start_ns, end_ns,
                   duration_ns,
                   row_number() OVER (PARTITION BY trace_id, batch_size, coalesce(rank, 0)
                                      ORDER BY start_ns) - 1 AS iteration
            FROM predicts
        ),
        placed AS (
            SELECT i.trace_id, i.batch_size, i.rank, i.iteration, c.start_ns,
                   c.end_ns - c.start_ns AS ns,
                   row_number() OVER (PARTITION BY i.trace_id, i.batch_size, i.rank, i.iteration
                                      ORDER BY c.start_ns) AS position
            FROM collective_spans c JOIN iterations i
              ON i.trace_id = c.trace_id AND i.rank = c.rank
             AND c.launch_ns BETWEEN i.start_ns AND i.end_ns
        ),
        arrivals AS (
            -- a rank waits in a collective at most as long as it ran there: an issue that
            -- returns at once (gloo's asynchronous ops) waited for nobody
            SELECT *, least(max(start_ns) OVER (PARTITION BY trace_id, batch_size, iteration,
                                                      position) - start_ns, ns) AS wait_ns,
                      count(*) OVER (PARTITION BY trace_id, batch_size, iteration, position)
                          AS joined
            FROM placed
        ),
        per_rank AS (
            SELECT trace_id, batch_size, rank, iteration, count(*) AS collectives,
                   sum(ns) AS comm_ns, sum(wait_ns) FILTER (WHERE joined > 1) AS wait_ns
            FROM arrivals GROUP BY trace_id, batch_size, rank, iteration
        )
        SELECT i.trace_id, i.batch_size, i.iteration, i.rank,
               i.duration_ns / 1e6 AS "time (ms)",
               arg_max(i.rank, i.duration_ns) OVER iteration AS "slowest rank",
               max(i.duration_ns) OVER iteration / 1e6 AS "slowest (ms)",
               (max(i.end_ns) OVER iteration - i.end_ns) / 1e6 AS "behind slowest (ms)",
               coalesce(p.collectives, 0) AS collectives,
               coalesce(p.comm_ns, 0) / 1e6 AS "communication (ms)",
               coalesce(p.wait_ns, 0) / 1e6 AS "wait (ms)"
        FROM iterations i LEFT JOIN per_rank p USING (trace_id, batch_size, rank, iteration)
        WINDOW iteration AS (PARTITION BY i.trace_id, i.batch_size, i.iteration)
        ORDER BY i.trace_id, i.batch_size, i.iteration, i.rank
        """
    )


def collectives(spans: Spans) -> pd.DataFrame:
    """What does each collective move, and how fast? Per trace, batch size, rank, collective
    (kernel or op name) and message size: calls, the size (nccl-tests' S: the larger buffer),
    mean and total time on the rank, the mean and total transfer, algorithm bandwidth (bytes
    over the transfer) and bus bandwidth (nccl-tests: algbw times 2(n-1)/n for an all-reduce,
    (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for broadcast and reduce; n the
    group's ranks, else the trace's). Bandwidths are null where the trace does not record the
    size.

    A collective's time on a rank includes its wait for the last rank to join; the *transfer*
    is the call's shortest time over the ranks (calls matched across ranks by order): the rank
    that joined last waited for no one. nccl-tests times collectives that start together, so
    its bandwidths are of the transfer."""
    frame = spans.frame(
        f"""
        WITH {_COLLECTIVES},
        ranks AS (
            SELECT trace_id, count(DISTINCT {_RANK}) AS ranks FROM spans s GROUP BY trace_id
        ),
        matched AS (
            SELECT *, row_number() OVER (PARTITION BY trace_id, batch_size, rank
                                         ORDER BY start_ns) AS position
            FROM collective_spans
        ),
        calls AS (
            SELECT *, min(end_ns - start_ns) OVER (PARTITION BY trace_id, batch_size, position)
                          AS transfer_ns
            FROM matched
        ),
        grouped AS (
            SELECT c.trace_id, c.batch_size, c.rank, c.name,
                   {collective_sql("c.name")} AS collective,
                   c.collective_bytes AS bytes,
                   coalesce(any_value(c.group_size), any_value(r.ranks)) AS group_ranks,
                   count(*) AS calls, sum(c.end_ns - c.start_ns) AS ns,
                   sum(c.transfer_ns) AS transfer_ns
            FROM calls c JOIN ranks r USING (trace_id)
            GROUP BY c.trace_id, c.batch_size, c.rank, c.name, c.collective_bytes
        )
        SELECT trace_id, batch_size, rank, name, collective, group_ranks AS ranks, calls,
               bytes / 1e6 AS "size (MB)", ns / calls / 1e3 AS "mean (us)",
               ns / 1e6 AS "total (ms)", transfer_ns / calls / 1e3 AS "transfer (us)",
               transfer_ns / 1e6 AS "transfer total (ms)",
               bytes * calls / nullif(transfer_ns, 0) AS "algbw (GB/s)",
               bytes * calls / nullif(transfer_ns, 0)
                   * {bus_factor_sql("collective", "group_ranks")} AS "busbw (GB/s)"
        FROM grouped ORDER BY trace_id, batch_size, rank, ns DESC
        """
    )
    # CUPTI names NCCL's kernels mangled; a row per collective, so demangled here.
    mangled = frame["name"].str.startswith("_Z", na=False)
    frame.loc[mangled, "name"] = frame.loc[mangled, "name"].map(short_kernel_name)
    return frame


def trace_ranks(spans: Spans) -> pd.DataFrame:
    """How many ranks recorded each trace (one for a trace without ranks)? Whether the
    distributed analyses have something to compare."""
    return spans.frame(
        "SELECT trace_id, count(DISTINCT coalesce(rank, 0)) AS ranks FROM spans "
        "GROUP BY trace_id ORDER BY trace_id"
    )
