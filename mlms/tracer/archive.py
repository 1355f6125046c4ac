"""The trace archive: one Parquet file of span rows per trace (``traces/<id>/spans.parquet``)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mlms.errors import StoreError, UnknownEvaluation
from mlms.store.base import ObjectStore
from mlms.tracer.spans import COLUMNS, SpanRecord

SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_id", pa.string()),
        ("level", pa.int8()),
        ("run", pa.int16()),
        ("name", pa.string()),
        ("kind", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("thread", pa.int64()),
        ("device", pa.string()),
        ("stream", pa.int64()),
        ("correlation_id", pa.int64()),
        ("layer_index", pa.int32()),
        ("attributes", pa.string()),
    ]
)
assert tuple(SCHEMA.names) == COLUMNS


def archive_key(trace_id: str) -> str:
    return f"traces/{trace_id}/spans.parquet"


def to_parquet(records: Sequence[SpanRecord]) -> bytes:
    table = pa.Table.from_pylist([r.to_row() for r in records], schema=SCHEMA)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def write_spans(store: ObjectStore, trace_id: str, records: Sequence[SpanRecord]) -> str:
    key = archive_key(trace_id)
    store.put_bytes(key, to_parquet(records))
    return key


def read_spans(store: ObjectStore, trace_id: str) -> pd.DataFrame:
    """The archived spans of a trace as a DataFrame with the archive's columns."""
    try:
        data = store.get_bytes(archive_key(trace_id))
    except StoreError as exc:
        raise UnknownEvaluation(f"no span archive for trace {trace_id!r} in {store.url}") from exc
    return pq.read_table(io.BytesIO(data)).to_pandas()


def records_of(frame: pd.DataFrame) -> list[SpanRecord]:
    return [SpanRecord.from_row(row) for row in frame.to_dict("records")]
