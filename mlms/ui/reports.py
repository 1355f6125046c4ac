"""The report of ``mlms report`` for one or more evaluations, built once and kept; the Chrome
trace of one. Records never change once stored, so a built report stays right."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from mlms.client import Client
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRecord

#: Reports kept (each a few MB: plotly.js is inside every one).
KEEP = 8


class Reports:
    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._pages: OrderedDict[tuple[str, ...], str] = OrderedDict()

    def page(self, records: Sequence[EvaluationRecord]) -> str:
        from mlms.analysis.engine import Spans
        from mlms.report import advice_for, bounds_for, build_report  # plotly loads on use

        key = tuple(r.id for r in records)
        with self._lock:
            if key in self._pages:
                self._pages.move_to_end(key)
                return self._pages[key]
        bounds = bounds_for(records, self._client.list_bounds())
        spans = Spans.from_parquet(
            [self._client.span_archive(r.trace_id) for r in records if r.trace_id]
        )
        advice = advice_for(records, self._client.list_advice())
        text = build_report(records, spans, bounds=bounds, advice=advice)
        with self._lock:
            self._pages[key] = text
            while len(self._pages) > KEEP:
                self._pages.popitem(last=False)
        return text


def chrome_trace(client: Client, record: EvaluationRecord) -> dict[str, object]:
    """The evaluation's spans as Chrome/Perfetto trace events (``mlms trace export``)."""
    from mlms.tracer.chrome import to_chrome

    if record.trace_id is None:
        raise InvalidArgument(f"evaluation {record.id} has no trace (trace level no_trace)")
    return to_chrome(client.spans(record.trace_id))
