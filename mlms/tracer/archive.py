"""The trace archive: one Parquet file of span rows per trace (``traces/<id>/spans.parquet``).

What the analyses filter, join or sum on is a typed column (docs/DESIGN.md, "Span record"): the
batch size of the predict a span belongs to, a layer's operator type, shapes, parameters,
framework-counted flops and bytes, a kernel's hardware counters. The writer moves those
attributes out of the JSON ``attributes`` string into their columns; ``SpanRecord.from_row``
puts them back, so a record round-trips. Archives written before the typed columns existed
are upgraded on read by one vectorised JSON pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from mlms.config import mlms_home
from mlms.errors import InvalidArgument, StoreError, UnknownEvaluation
from mlms.store.base import ObjectStore
from mlms.store.local import LocalStore
from mlms.tracer.spans import COLUMNS, SpanRecord

if TYPE_CHECKING:  # every agent writes archives; only readers of small tables need pandas
    import pandas as pd

BATCH_SIZE_ATTRIBUTE = "mlms.batch_size"
RANK_ATTRIBUTE = "mlms.rank"

_SHAPES = pa.list_(pa.list_(pa.int64()))


@dataclass(frozen=True)
class TypedColumn:
    """An archive column filled from one span attribute (the first of ``keys`` present)."""

    name: str
    type: pa.DataType
    keys: tuple[str, ...]
    meaning: str


#: Typed columns after the base columns, in archive order. ``batch_size`` is also filled for
#: every span below one that names it (the batch's span, its model spans), by parent links.
TYPED_COLUMNS: tuple[TypedColumn, ...] = (
    TypedColumn("batch_size", pa.int32(), (BATCH_SIZE_ATTRIBUTE,), "inputs in the predict"),
    TypedColumn("op_type", pa.string(), ("op_type",), "the framework's layer or op type"),
    TypedColumn("input_shapes", _SHAPES, ("input_shapes",), "shapes of the tensor inputs"),
    TypedColumn("output_shapes", _SHAPES, ("output_shapes",), "shapes of the outputs"),
    TypedColumn("params", pa.int64(), ("params",), "parameters (weights) of the layer"),
    TypedColumn("flops", pa.float64(), ("flops",), "framework-counted flops (2 per MAC)"),
    TypedColumn("activation_bytes", pa.int64(), ("activation_bytes",), "output bytes"),
    TypedColumn("allocated_bytes", pa.int64(), ("allocated_bytes",), "memory the layer allocated"),
    TypedColumn(
        "counter_duration_ns", pa.int64(), ("counter.duration_ns",), "ncu's kernel duration"
    ),
    TypedColumn("counter_flops", pa.float64(), ("counter.flops",), "flops ncu counted"),
    TypedColumn(
        "counter_tensor_flops", pa.float64(), ("counter.flops_tensor",), "tensor-core flops"
    ),
    TypedColumn("dram_read_bytes", pa.float64(), ("counter.dram_read_bytes",), "DRAM bytes read"),
    TypedColumn(
        "dram_write_bytes", pa.float64(), ("counter.dram_write_bytes",), "DRAM bytes written"
    ),
    TypedColumn(
        "occupancy_pct",
        pa.float64(),
        ("counter.achieved_occupancy_pct",),
        "achieved occupancy, % of peak",
    ),
    TypedColumn("bound", pa.string(), ("counter.bound",), "roofline side: memory or compute"),
    TypedColumn("rank", pa.int32(), (RANK_ATTRIBUTE,), "the rank (process) that recorded it"),
    TypedColumn(
        "collective_bytes",
        pa.int64(),
        ("collective.bytes",),
        "a collective's message size as nccl-tests counts it (its larger buffer)",
    ),
    TypedColumn(
        "group_size", pa.int32(), ("collective.group_size",), "ranks in the collective's group"
    ),
)
_BASE_TYPES: tuple[tuple[str, pa.DataType], ...] = (
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
)
assert tuple(name for name, _ in _BASE_TYPES) == COLUMNS
SCHEMA = pa.schema([*_BASE_TYPES, *((c.name, c.type) for c in TYPED_COLUMNS)])
#: String columns with few distinct values (a million kernels share a few hundred names): read
#: as dictionaries, they take a fraction of the memory.
ROW_GROUP = 65_536
DICTIONARY_COLUMNS = ("trace_id", "name", "kind", "device", "op_type", "bound", "attributes")
#: Columns with about one value per span: a Parquet dictionary of them would be built and given
#: up in every row group, and zstd packs them tighter plain (a third less file, a quarter less
#: time to write).
UNIQUE_COLUMNS = ("span_id", "parent_id", "start_ns", "end_ns", "correlation_id")
_TYPED_KEYS = {key: column.name for column in TYPED_COLUMNS for key in column.keys}


def archive_key(trace_id: str) -> str:
    return f"traces/{trace_id}/spans.parquet"


def to_table(records: Sequence[SpanRecord]) -> pa.Table:
    """The archive's rows for finished spans (typed attributes moved into their columns)."""
    batch_of = _batch_sizes(records)
    rows = []
    for record in records:
        row = record.to_row()
        attributes = dict(record.attributes)
        typed: dict[str, Any] = {}
        for key in list(attributes):
            column = _TYPED_KEYS.get(key)
            if column is not None and column not in typed:
                typed[column] = _typed_value(column, attributes.pop(key))
        typed.setdefault("batch_size", batch_of.get(record.span_id))
        row["attributes"] = json.dumps(attributes, sort_keys=True, default=str)
        rows.append(row | typed)
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def to_parquet(table: pa.Table) -> bytes:
    """Parquet bytes of an archive table, its rows ordered by leveled run, level and start in
    row groups of ``ROW_GROUP`` rows: a scan for one run's kernels (or layers) then skips the
    row groups whose statistics rule them out, however large the archive."""
    ordered = table.sort_by(
        [("run", "ascending"), ("level", "ascending"), ("start_ns", "ascending")]
    )
    sink = pa.BufferOutputStream()  # Arrow's own buffer: no Python file object (read_parquet)
    pq.write_table(
        ordered,
        sink,
        compression="zstd",
        row_group_size=ROW_GROUP,
        use_dictionary=[name for name in ordered.column_names if name not in UNIQUE_COLUMNS],
    )
    return sink.getvalue().to_pybytes()


def write_spans(store: ObjectStore, trace_id: str, records: Sequence[SpanRecord]) -> str:
    return write_table(store, trace_id, to_table(records))


def write_table(store: ObjectStore, trace_id: str, table: pa.Table) -> str:
    """Store an archive table (for example one imported from another tool's trace)."""
    key = archive_key(trace_id)
    store.put_bytes(key, to_parquet(upgrade(table)))
    return key


#: Archives at least this large are decoded on Arrow's thread pool, smaller ones on the calling
#: thread: on a 2-core VM a 0.5 MiB archive decodes in 13-21 ms either way, a 4.7 MiB one in
#: 177-181 ms on one thread and 72-90 ms on the pool (``benchmarks/archive_read.py``).
THREADED_READ_BYTES = 1 << 20


def read_parquet(source: Path | bytes, **options: Any) -> pa.Table:
    """A whole Parquet file as one table, read through ``ParquetFile`` rather than
    ``pq.read_table``: the latter's dataset scan leaves work on Arrow's thread pools that a
    process exiting right after it aborts on ("terminate called without an active exception",
    apache/arrow#34314; most short CLI runs with pyarrow 26). Bytes are read through Arrow's
    own ``BufferReader``, never a Python file object: Arrow's reader threads would call back
    into Python for each read, and a pool thread still holding such a call at interpreter
    exit aborts the process the same way (apache/arrow#50482). Even so, a process whose read
    started the pool and that exits at once still aborted now and then on a loaded 2-core
    machine (once in a CI run's ten), so an archive under ``THREADED_READ_BYTES`` (what a
    short CLI command reads) is read into memory and decoded there on the calling thread: a
    file read through Arrow starts its IO thread even then, a buffer starts none."""
    size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
    threaded = size >= THREADED_READ_BYTES
    if not threaded and not isinstance(source, bytes):
        source = Path(source).read_bytes()
    readable = pa.BufferReader(source) if isinstance(source, bytes) else source
    return pq.ParquetFile(readable, **options).read(use_threads=threaded)


def read_table(store: ObjectStore, trace_id: str) -> pa.Table:
    """The archived spans of a trace as an Arrow table with the archive's schema.

    Names, kinds and op types come dictionary-encoded: a million kernel rows share a few
    hundred distinct names."""
    try:
        data = store.get_bytes(archive_key(trace_id))
    except StoreError as exc:
        raise UnknownEvaluation(f"no span archive for trace {trace_id!r} in {store.url}") from exc
    return upgrade(read_parquet(data, read_dictionary=DICTIONARY_COLUMNS))


def local_archive(store: ObjectStore, trace_id: str) -> Path:
    """The trace's archive as a Parquet file on this machine, for engines that scan files in
    place: a local store's own file, else a copy cached under ``$MLMS_HOME/cache/traces``
    (an archive never changes once written)."""
    key = archive_key(trace_id)
    if isinstance(store, LocalStore):
        path = store.path_of(key)
        if not path.is_file():
            raise UnknownEvaluation(f"no span archive for trace {trace_id!r} in {store.url}")
        return path
    path = cached_archive(trace_id)
    if not path.is_file():
        try:
            store.get_file(key, path)
        except StoreError as exc:
            raise UnknownEvaluation(
                f"no span archive for trace {trace_id!r} in {store.url}"
            ) from exc
    return path


def cached_archive(trace_id: str) -> Path:
    """Where a fetched copy of a trace's archive is kept on this machine."""
    if not re.fullmatch(r"[0-9a-f]{1,64}", trace_id):
        raise InvalidArgument(f"bad trace id {trace_id!r}: expected hexadecimal digits")
    return mlms_home() / "cache" / "traces" / f"{trace_id}.parquet"


def read_spans(store: ObjectStore, trace_id: str) -> pd.DataFrame:
    """The archived spans of a trace as a DataFrame with the archive's columns (plain strings,
    not categoricals: for tests and small tables)."""
    return read_table(store, trace_id).cast(SCHEMA).to_pandas()


def upgrade(table: pa.Table) -> pa.Table:
    """``table`` with every archive column, in archive order and type.

    Columns an older archive lacks are read out of its JSON attributes (one vectorised pass);
    ``batch_size`` below MODEL spans is filled from them by parent links."""
    missing = [c for c in TYPED_COLUMNS if c.name not in table.column_names]
    if missing:
        table = _typed_from_json(table, missing)
    table = table.select(SCHEMA.names)
    if table.schema.equals(SCHEMA):
        return table
    return table.cast(
        pa.schema([_read_as(field, table.schema.field(field.name)) for field in SCHEMA])
    )


def _read_as(field: pa.Field, actual: pa.Field) -> pa.Field:
    """The archive's field, kept dictionary-encoded where it was read so."""
    if pa.types.is_dictionary(actual.type) and actual.type.value_type == field.type:
        return actual
    return field


def records_of(frame: pd.DataFrame) -> list[SpanRecord]:
    """Span records from archive rows (typed columns back into ``attributes``): for tests and
    small tables, never on an analysis path."""
    typed = [c for c in TYPED_COLUMNS if c.name in frame.columns]
    records = []
    for row in frame.to_dict("records"):
        attributes = json.loads(row.get("attributes") or "{}")
        for column in typed:
            value = _plain(row[column.name])
            if value is not None:
                attributes.setdefault(column.keys[0], value)
        records.append(SpanRecord.from_row({**row, "attributes": json.dumps(attributes)}))
    return records


def _batch_sizes(records: Sequence[SpanRecord]) -> dict[str, int]:
    """span id -> the batch size of the nearest span above it (or itself) that names one."""
    parent = {r.span_id: r.parent_id for r in records}
    result = {
        r.span_id: int(r.attributes[BATCH_SIZE_ATTRIBUTE])
        for r in records
        if BATCH_SIZE_ATTRIBUTE in r.attributes
    }
    for record in records:
        chain, current = [], record.span_id
        while current is not None and current not in result:
            chain.append(current)
            current = parent.get(current)
        if current is not None:
            for span_id in chain:
                result[span_id] = result[current]
    return result


def _typed_value(column: str, value: Any) -> Any:
    if column == "output_shapes" and value and not isinstance(value[0], list):
        return [value]  # one output's shape
    if column == "input_shapes" and value:
        return [shape for shape in value if isinstance(shape, list)]
    return value


def _plain(value: Any) -> Any:
    if value is None or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _typed_from_json(table: pa.Table, missing: list[TypedColumn]) -> pa.Table:
    import duckdb

    selects = []
    for column in missing:
        paths = [f"json_extract(attributes, '$.\"{key}\"')" for key in column.keys]
        raw = paths[0] if len(paths) == 1 else f"coalesce({', '.join(paths)})"
        selects.append(f"try_cast({raw} AS {_duck_type(column.type)}) AS {column.name}")
    query = f"SELECT {', '.join(selects)} FROM spans"
    connection = duckdb.connect()
    connection.register("spans", table)
    extracted = connection.sql(query).to_arrow_table()
    for name in extracted.column_names:
        table = table.append_column(name, extracted[name])
    if any(c.name == "batch_size" for c in missing):
        table = _batch_sizes_by_parent(connection, table)
    return table


def _batch_sizes_by_parent(connection: Any, table: pa.Table) -> pa.Table:
    """Fill ``batch_size`` down the parent links (at most one pass per level of nesting)."""
    connection.register("spans", table)
    filled = connection.sql(
        """
        WITH RECURSIVE walk(span_id, batch_size) AS (
            SELECT span_id, batch_size FROM spans WHERE batch_size IS NOT NULL
            UNION ALL
            SELECT child.span_id, walk.batch_size
            FROM spans child JOIN walk ON child.parent_id = walk.span_id
            WHERE child.batch_size IS NULL
        )
        SELECT s.* EXCLUDE (batch_size), w.batch_size
        FROM spans s LEFT JOIN (SELECT span_id, any_value(batch_size) AS batch_size
                                FROM walk GROUP BY span_id) w USING (span_id)
        """
    ).to_arrow_table()
    return filled


def _duck_type(arrow_type: pa.DataType) -> str:
    if arrow_type == _SHAPES:
        return "BIGINT[][]"
    return {
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.float64(): "DOUBLE",
        pa.string(): "VARCHAR",
    }[arrow_type]
