"""Chrome / Perfetto trace-event JSON from span rows (open in ui.perfetto.dev)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from mlms.tracer.levels import TraceLevel


def to_chrome(spans: pd.DataFrame) -> dict[str, Any]:
    """Complete ("X") events; one process per leveled run, one track per level and thread."""
    events: list[dict[str, Any]] = []
    origin = int(spans["start_ns"].min()) if len(spans) else 0
    tracks: dict[tuple[int, str], int] = {}
    for row in spans.itertuples(index=False):
        level = TraceLevel(int(row.level))
        thread = "" if pd.isna(row.thread) else f" thread {int(row.thread)}"
        key = (int(row.run), f"{level.label}{thread}")
        tid = tracks.setdefault(key, len(tracks) + 1)
        events.append(
            {
                "name": row.name,
                "cat": row.kind or level.label,
                "ph": "X",
                "ts": (int(row.start_ns) - origin) / 1000,
                "dur": (int(row.end_ns) - int(row.start_ns)) / 1000,
                "pid": int(row.run),
                "tid": tid,
                "args": {
                    "level": level.label,
                    "span_id": row.span_id,
                    "parent_id": row.parent_id,
                    **json.loads(row.attributes or "{}"),
                },
            }
        )
    for (run, label), tid in tracks.items():
        events.append(
            {"name": "thread_name", "ph": "M", "pid": run, "tid": tid, "args": {"name": label}}
        )
    for run in {run for run, _ in tracks}:
        events.append(
            {"name": "process_name", "ph": "M", "pid": run, "args": {"name": f"leveled run {run}"}}
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}
