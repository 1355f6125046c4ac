"""One iteration on a timeline: what ran when inside a typical predict."""

from __future__ import annotations

import pandas as pd

from mlms.analysis.engine import Spans


def iteration_timeline(spans: Spans, trace_id: str, batch_size: int) -> pd.DataFrame:
    """What happens inside one predict, and when? Every span of the layer run's median-length
    predict at ``batch_size`` (the predict itself, its layers, API calls and GPU work), with
    its start and end in microseconds from the predict's start, level, kind and the layer it
    belongs to. GPU work is placed by its own timestamps, so the gaps where the device waits
    show."""
    return spans.frame(
        """
        WITH chosen AS (
            SELECT span_id, start_ns, end_ns FROM predicts
            WHERE trace_id = ? AND batch_size = ?
            ORDER BY duration_ns, span_id
            LIMIT 1 OFFSET (SELECT (count(*) - 1) // 2 FROM predicts
                            WHERE trace_id = ? AND batch_size = ?)
        )
        SELECT s.name, s.level, s.kind, s.layer_index, s.stream,
               (s.start_ns - c.start_ns) / 1e3 AS "start (us)",
               (s.end_ns - c.start_ns) / 1e3 AS "end (us)",
               (s.end_ns - s.start_ns) / 1e3 AS "duration (us)"
        FROM spans s, chosen c
        WHERE s.trace_id = ? AND s.run = (SELECT layer_run FROM runs WHERE trace_id = ?)
          AND s.level >= 2 AND s.start_ns >= c.start_ns AND s.end_ns <= c.end_ns
        ORDER BY s.level, s.start_ns
        """,
        [trace_id, batch_size, trace_id, batch_size, trace_id, trace_id],
    )
