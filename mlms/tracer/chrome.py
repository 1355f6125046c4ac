"""Chrome / Perfetto trace-event JSON from span rows (open in ui.perfetto.dev)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from mlms.tracer.archive import TYPED_COLUMNS
from mlms.tracer.levels import TraceLevel


def to_chrome(spans: pa.Table) -> dict[str, Any]:
    """Complete ("X") events; one process per leveled run, one track per rank (of several),
    level and thread.

    Each event's args hold the span's attributes, typed columns included under their
    attribute names."""
    events: list[dict[str, Any]] = []
    starts = spans.column("start_ns").to_pylist()
    origin = min(starts) if starts else 0
    tracks: dict[tuple[int, str], int] = {}
    typed = [(c.name, c.keys[0]) for c in TYPED_COLUMNS]
    for row in spans.to_pylist():
        level = TraceLevel(int(row["level"]))
        thread = "" if row["thread"] is None else f" thread {int(row['thread'])}"
        rank = "" if row["rank"] is None else f"rank {int(row['rank'])} "
        key = (int(row["run"]), f"{rank}{level.label}{thread}")
        tid = tracks.setdefault(key, len(tracks) + 1)
        args = {"level": level.label, "span_id": row["span_id"], "parent_id": row["parent_id"]}
        args |= json.loads(row["attributes"] or "{}")
        args |= {key: row[name] for name, key in typed if row[name] is not None}
        events.append(
            {
                "name": row["name"],
                "cat": row["kind"] or level.label,
                "ph": "X",
                "ts": (int(row["start_ns"]) - origin) / 1000,
                "dur": (int(row["end_ns"]) - int(row["start_ns"])) / 1000,
                "pid": int(row["run"]),
                "tid": tid,
                "args": args,
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
