"""Kineto (PyTorch profiler) traces as mlms span archives, so every analysis runs on them.

A trace written by ``torch.profiler.profile(...).export_chrome_trace`` (or the tensorboard
trace handler) maps onto the trace levels like this:

============================  =================  =============================================
Kineto event                  level              kind, columns
============================  =================  =============================================
``ProfilerStep#N`` annotation MODEL (2)          ``model``; ``batch_size`` (given)
other ``user_annotation``     APPLICATION (1)    ``annotation`` (a backend's collective,
                                                 ``gloo:all_reduce``: ``communication``)
``cpu_op``                    FRAMEWORK (3)      the shared layer vocabulary; ``op_type`` (the
                                                 aten name), ``input_shapes`` ("Input Dims")
``cuda_runtime``/``_driver``  SYSTEM_LIBRARY (5) ``runtime``/``driver``; ``correlation_id``
``kernel``/``gpu_memcpy``/    HARDWARE (6)       ``kernel`` (NCCL's: ``communication``),
``gpu_memset``                                   ``memcpy``/``memset``; ``device`` (cuda:N),
                                                 ``stream``, ``correlation_id``
============================  =================  =============================================

Parents: a GPU activity's is the runtime or driver call with its correlation id; a runtime
call's, the innermost ``cpu_op`` (else ProfilerStep) around it on its thread; a ``cpu_op``'s,
the innermost ``cpu_op`` or ProfilerStep around it on its thread; an annotation's, the
innermost annotation around it. The top-level ops of each step are its layers: their
``layer_index`` counts them in execution order from 0 (nested ops have none). Every span below
a step carries the step's batch size. A trace without ProfilerStep annotations gets one MODEL
span, ``WHOLE_TRACE``, over its busiest thread's host events. Other events (flows, metadata,
python functions, GPU-side copies of annotations) are left out.

No Python object per event: DuckDB parses the streamed event array (``kineto_events``) into
Arrow columns, the parents come from queries (``kineto_nesting``), and the archive's columns
are assembled from whole arrays, so a trace of a million kernels imports in seconds.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mlms.analysis.kineto_events import EventParts, TraceText, file_system
from mlms.analysis.kineto_nesting import API, APPLICATION, FRAMEWORK, HARDWARE, MODEL, span_links
from mlms.errors import InvalidArgument
from mlms.tracer.archive import DICTIONARY_COLUMNS, SCHEMA
from mlms.tracer.communication import COMMUNICATION, dtype_bytes_sql, is_communication
from mlms.tracer.layer_kinds import normalise_kind

CATEGORIES = (
    "user_annotation",
    "cpu_op",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
)
#: Kinds of the spans that are not ops, by Kineto category (ProfilerSteps are "model").
KINDS = {
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
}
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
#: DuckDB's share of memory during an import; sorts beyond it spill to disk.
MEMORY_LIMIT = "600MB"
#: The MODEL span of a trace without ProfilerStep annotations: its whole profiled range.
WHOLE_TRACE = "whole trace (no ProfilerStep#N)"

# What is read of each event; args not named here are not read at all.
_EVENT_COLUMNS = {
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "pid": "JSON",  # numbers, but strings on Kineto's own bookkeeping events
    "tid": "JSON",
    "ts": "DOUBLE",
    "dur": "DOUBLE",
    "args": (
        'STRUCT(correlation BIGINT, device BIGINT, stream BIGINT, "Input Dims" JSON, '
        'grid BIGINT[], block BIGINT[], "registers per thread" BIGINT, '
        '"shared memory" BIGINT, bytes BIGINT, "In msg nelems" BIGINT, '
        '"Out msg nelems" BIGINT, dtype VARCHAR, "Group size" BIGINT)'
    ),
}


@dataclass(frozen=True)
class KinetoTrace:
    """An imported trace: its spans in the archive schema and what the file says about itself."""

    table: pa.Table
    trace_id: str
    #: The sha256 of the file as given (the trace id is its first 32 hex digits).
    sha256: str
    #: The trace object's members other than traceEvents (deviceProperties, versions, ...).
    metadata: dict[str, Any]
    #: The file each rank's spans came from, for a folder of rank traces.
    sources: dict[int, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class ParsedTrace:
    """One file's kept events and their parent links, before they become archive rows."""

    rows: pa.Table
    links: pa.Table
    sha256: str
    metadata: dict[str, Any]
    base_ns: int
    #: ``distributedInfo.rank``: which process of a distributed run recorded it, if said.
    rank: int | None

    def spans(self, trace_id: str, batch_size: int, first_row: int = 0) -> pa.Table:
        """The archive rows, their span ids numbered from ``first_row`` (so that several
        files' rows share one trace)."""
        return _assemble(self, trace_id, batch_size, first_row)


def kineto_table(data: bytes | str | Path, *, batch_size: int = 1) -> pa.Table:
    """The spans of a Kineto trace (``bytes`` are the file's content; ``str`` is a path),
    in the archive schema ``mlms.tracer.archive.SCHEMA``, with the columns of few distinct
    values dictionary-encoded as ``read_table`` gives them (a million kernels share a few
    hundred names)."""
    return read_kineto(data, batch_size=batch_size).table


def read_kineto(data: bytes | str | Path, *, batch_size: int = 1) -> KinetoTrace:
    """Import a Kineto trace (JSON, gzipped or not). The trace id is the first 32 hex digits
    of the file's sha256, so importing the same file twice gives the same trace id.
    (``mlms.analysis.kineto_ranks`` imports a folder of rank traces.)"""
    check_batch_size(batch_size)
    parsed = parse_kineto(data)
    trace_id = parsed.sha256[:32]
    return KinetoTrace(
        table=parsed.spans(trace_id, batch_size),
        trace_id=trace_id,
        sha256=parsed.sha256,
        metadata=parsed.metadata,
        sources={} if parsed.rank is None or isinstance(data, bytes) else {parsed.rank: str(data)},
    )


def check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise InvalidArgument(f"bad batch size {batch_size}: expected a positive integer")


def parse_kineto(data: bytes | str | Path) -> ParsedTrace:
    """Parse a Kineto trace file (or its bytes) into its kept events and their links."""
    label = "the trace data" if isinstance(data, bytes) else str(data)
    with TraceText(data if isinstance(data, bytes) else Path(data), label) as text:
        events = EventParts(text)
        base_ns = _base_ns(events.metadata, label)
        connection = _connect(text.spill_folder())
        try:
            connection.register_filesystem(file_system(events))
            rows = _in_file_order(_encoded(_parse(connection, events)))
            rows = _with_whole_trace_step(rows)
            links = span_links(connection, _structure(rows))
        finally:
            connection.close()
        sha256 = text.sha256()
    return ParsedTrace(
        rows=rows,
        links=links,
        sha256=sha256,
        metadata=events.metadata,
        base_ns=base_ns,
        rank=_rank(events.metadata, label),
    )


def _parse(connection: duckdb.DuckDBPyConnection, events: EventParts) -> pa.Table:
    """The kept events, one row each, with their level, times (ns after the trace's clock
    base) and the columns the archive takes from their args."""
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in _EVENT_COLUMNS.items()) + "}"
    categories = ", ".join(f"'{c}'" for c in CATEGORIES)
    kind_codes = " ".join(f"WHEN '{cat}' THEN {code}" for code, cat in enumerate(KINDS))
    gpu = ", ".join(f"'{c}'" for c in GPU)
    shapes = 'list_filter(TRY_CAST(args."Input Dims" AS BIGINT[][]), lambda s: len(s) > 0)'
    try:
        rows = connection.sql(
            f"""
            SELECT CASE WHEN cat = 'user_annotation' AND name LIKE 'ProfilerStep#%' THEN {MODEL}
                        WHEN cat = 'user_annotation' THEN {APPLICATION}
                        WHEN cat = 'cpu_op' THEN {FRAMEWORK}
                        WHEN cat IN ('cuda_runtime', 'cuda_driver') THEN {API}
                        ELSE {HARDWARE} END::TINYINT AS level,
                   CASE cat {kind_codes} END::TINYINT AS kind_code,
                   coalesce(name, cat) AS name, TRY_CAST(pid AS BIGINT) AS pid,
                   TRY_CAST(tid AS BIGINT) AS tid,
                   round(ts * 1000)::BIGINT AS start_ns,
                   round(ts * 1000)::BIGINT + round(coalesce(dur, 0) * 1000)::BIGINT AS end_ns,
                   CASE WHEN cat LIKE 'cuda_%' OR cat IN ({gpu})
                        THEN args.correlation END AS correlation_id,
                   CASE WHEN cat IN ({gpu}) THEN args.device END::INTEGER AS gpu,
                   CASE WHEN cat IN ({gpu}) THEN args.stream END AS stream,
                   CASE WHEN cat = 'cpu_op' THEN nullif({shapes}, []) END AS input_shapes,
                   CASE WHEN cat = 'kernel' THEN json_object(
                            'grid', args.grid, 'block', args.block,
                            'registers per thread', args."registers per thread",
                            'shared memory', args."shared memory")
                        WHEN cat LIKE 'gpu_%' THEN json_object('bytes', args.bytes)
                        END::VARCHAR AS attributes,
                   greatest(args."In msg nelems", args."Out msg nelems")
                       * {dtype_bytes_sql("args.dtype")} AS collective_bytes,
                   args."Group size"::INTEGER AS group_size,
                   regexp_extract(filename, 'part([0-9]+)', 1)::SMALLINT AS part
            FROM read_json({events.paths()}, columns = {columns}, format = 'array',
                           filename = true)
            WHERE cat IN ({categories}) AND ts IS NOT NULL
            """
        ).to_arrow_table()
    except duckdb.Error as exc:
        raise InvalidArgument(
            f"{events.label} is not a valid Kineto trace: {str(exc).splitlines()[0]}"
        ) from exc
    return rows


def _in_file_order(rows: pa.Table) -> pa.Table:
    """``rows`` in the file's order. Each part is parsed by one thread, in order, but the
    threads' rows come interleaved: a stable sort by part puts them back (row numbers, and so
    span ids, then do not depend on the threads)."""
    part = rows["part"].to_numpy()
    rows = rows.drop_columns(["part"])
    if len(part) == 0 or (part[1:] >= part[:-1]).all():
        return rows
    return rows.take(pa.array(np.argsort(part, kind="stable")))


def _with_whole_trace_step(rows: pa.Table) -> pa.Table:
    """``rows`` with one MODEL span, ``WHOLE_TRACE``, over the host events of the busiest
    thread when the trace has no ProfilerStep (a plain ``with profile(): ...``), so that the
    analyses per predict still run on it; its attributes say that the file has no such span."""
    levels = rows["level"]
    if pc.any(pc.equal(levels, MODEL)).as_py():
        return rows
    host = rows.filter(pc.is_in(levels, pa.array([APPLICATION, FRAMEWORK, API], pa.int8())))
    if host.num_rows == 0:
        return rows
    threads = host.group_by(["pid", "tid"]).aggregate(
        [("start_ns", "min"), ("end_ns", "max"), ("level", "count")]
    )
    busiest = threads.sort_by([("level_count", "descending"), ("pid", "ascending")]).slice(0, 1)
    note = '{"mlms.note": "not in the trace, which has no ProfilerStep#N"}'
    step = {
        "level": pa.array([MODEL], pa.int8()),
        "name": _constant(1, WHOLE_TRACE),
        "pid": busiest["pid"],
        "tid": busiest["tid"],
        "start_ns": busiest["start_ns_min"],
        "end_ns": busiest["end_ns_max"],
        "attributes": _constant(1, note),
    }
    added = pa.table(
        {f.name: step.get(f.name, pa.nulls(1, f.type)) for f in rows.schema}, schema=rows.schema
    )
    return pa.concat_tables([rows, added]).unify_dictionaries().combine_chunks()


def _encoded(rows: pa.Table) -> pa.Table:
    """``rows`` with names and attributes dictionary-encoded (a million kernels share a few
    hundred names), before the rest of the import holds memory too."""
    for column, fill in (("name", None), ("attributes", "{}")):
        index = rows.schema.get_field_index(column)
        rows = rows.set_column(index, column, _dictionary(rows[column], fill=fill))
    return rows


def _structure(rows: pa.Table) -> pa.Table:
    """What the nesting queries need: times, threads, levels, correlation ids, row numbers."""
    seq = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    columns = ["level", "pid", "tid", "start_ns", "end_ns", "correlation_id"]
    return rows.select(columns).append_column("seq", seq)


def _rank(metadata: dict[str, Any], label: str) -> int | None:
    """``distributedInfo.rank`` (torch.profiler records it where torch.distributed runs)."""
    info = metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if rank is None:
        return None
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise InvalidArgument(
            f"{label}: distributedInfo.rank is {rank!r}, expected a rank number (0, 1, ...)"
        )
    return rank


def _base_ns(metadata: dict[str, Any], label: str) -> int:
    """Kineto's timestamps are microseconds after ``baseTimeNanoseconds`` (wall clock)."""
    base = metadata.get("baseTimeNanoseconds", 0)
    if not isinstance(base, int):
        raise InvalidArgument(f"{label}: baseTimeNanoseconds is {base!r}, expected an integer")
    return base


def _assemble(parsed: ParsedTrace, trace_id: str, batch_size: int, first_row: int) -> pa.Table:
    """The archive's columns in its order and types, from whole arrays: span ids from row
    numbers (after ``first_row``), parents and steps scattered onto the rows, op kinds from the
    distinct names, repetitive strings dictionary-encoded (as ``read_table`` gives them)."""
    rows, links = parsed.rows, parsed.links
    count = rows.num_rows
    seq = links["seq"].to_numpy()
    parent = _scatter(count, seq, links["parent_seq"])
    step = _scatter(count, seq, links["step_seq"])
    layer = _scatter(count, seq, links["layer_index"])
    levels = rows["level"].combine_chunks()
    level = levels.to_numpy()
    names = rows["name"].combine_chunks()
    is_op = level == FRAMEWORK
    collective = np.array([is_communication(n) for n in names.dictionary.to_pylist()] or [False])
    collective = collective[names.indices.to_numpy(zero_copy_only=False)]
    launched = (level == HARDWARE) & collective
    made = {
        "trace_id": _constant(count, trace_id),
        "span_id": _hex_ids(trace_id[:8], np.arange(count) + first_row, None),
        "parent_id": _hex_ids(trace_id[:8], parent + first_row, parent >= 0),
        "level": levels,
        "run": pa.array(np.ones(count, dtype=np.int16)),
        "name": names,
        "kind": _kinds(level, rows["kind_code"], names, collective),
        "start_ns": pc.add(rows["start_ns"], parsed.base_ns),
        "end_ns": pc.add(rows["end_ns"], parsed.base_ns),
        "thread": pc.if_else(pa.array(level < HARDWARE), rows["tid"], None),
        "device": _devices(rows["gpu"]),
        "layer_index": pa.array(layer.astype(np.int32), mask=layer < 0),
        "attributes": rows["attributes"].combine_chunks(),
        "batch_size": pa.array(np.full(count, batch_size, np.int32), mask=step < 0),
        "op_type": pa.DictionaryArray.from_arrays(
            pa.array(names.indices.to_numpy(zero_copy_only=False), mask=~is_op),
            names.dictionary,
        ),
        "collective_bytes": _from_launching_op(rows["collective_bytes"], parent, launched),
        "group_size": _from_launching_op(rows["group_size"], parent, launched),
    }
    if parsed.rank is not None:
        made["rank"] = pa.array(np.full(count, parsed.rank, dtype=np.int32))
    empty = _Empty(count)
    columns = []
    for field in SCHEMA:
        if field.name in made:
            column = made[field.name]
        elif field.name in rows.column_names:
            column = rows[field.name]
            if column.type != field.type:
                column = column.cast(field.type)
        else:
            column = empty.of(field)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=SCHEMA.names)


class _Empty:
    """All-null columns of ``count`` rows that share one zeroed buffer (the typed columns an
    import leaves empty would otherwise take 30 MB each at a million kernels)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._zeros = pa.py_buffer(np.zeros(8 * (count + 1), dtype=np.uint8))

    def of(self, field: pa.Field) -> pa.Array:
        if field.name in DICTIONARY_COLUMNS:
            indices = self._array(pa.int32())
            return pa.DictionaryArray.from_arrays(indices, pa.array([], field.type))
        if pa.types.is_list(field.type):  # lists of lists: every offset 0, no values
            inner = pa.array([], field.type.value_type)
            return pa.Array.from_buffers(
                field.type, self.count, [self._zeros, self._zeros], self.count, children=[inner]
            )
        return self._array(field.type)

    def _array(self, kind: pa.DataType) -> pa.Array:
        return pa.Array.from_buffers(kind, self.count, [self._zeros, self._zeros], self.count)


def _connect(spill: Path) -> duckdb.DuckDBPyConnection:
    """DuckDB with a memory limit (it spills the rest to ``spill``) and no progress bar."""
    connection = duckdb.connect(
        config={
            "memory_limit": MEMORY_LIMIT,
            "temp_directory": str(spill),
            "threads": len(os.sched_getaffinity(0)),
        }
    )
    connection.execute("SET enable_progress_bar = false")
    return connection


def _dictionary(strings: pa.ChunkedArray, fill: str | None = None) -> pa.DictionaryArray:
    """``strings`` dictionary-encoded chunk by chunk into one sorted dictionary (the same
    whatever order the rows came in); nulls become ``fill`` when given."""
    encoded = pc.dictionary_encode(strings)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.unify_dictionaries().combine_chunks()
    values = encoded.dictionary.to_pylist()
    if fill is not None and encoded.null_count and fill not in values:
        values.append(fill)
    if not values:
        return encoded
    order = sorted(range(len(values)), key=values.__getitem__)
    renumber = np.empty(len(values), dtype=np.int32)
    renumber[order] = np.arange(len(values), dtype=np.int32)
    indices = encoded.indices
    if fill is not None:
        indices = indices.fill_null(values.index(fill))
    positions = indices.fill_null(0).to_numpy()
    renumbered = pa.array(
        renumber[positions], mask=indices.is_null().to_numpy(zero_copy_only=False)
    )
    return pa.DictionaryArray.from_arrays(renumbered, pa.array(sorted(values), pa.string()))


def _constant(count: int, value: str) -> pa.DictionaryArray:
    """``value`` on every row, stored once."""
    return pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(count, dtype=np.int32)), pa.array([value])
    )


def _kinds(
    level: np.ndarray, codes: pa.ChunkedArray, names: pa.DictionaryArray, collective: np.ndarray
) -> pa.Array:
    """Each span's kind: ops in the shared layer vocabulary (worked out once per distinct
    name), steps "model", the rest by Kineto category; kernels and annotations that are
    ``collective`` "communication"."""
    op_kinds = [normalise_kind(name) for name in names.dictionary.to_pylist()]
    vocabulary = ["model", *KINDS.values(), *sorted(set(op_kinds) | {COMMUNICATION})]
    position = {kind: index for index, kind in enumerate(vocabulary)}
    by_name = np.array([position[kind] for kind in op_kinds], dtype=np.int32)
    indices = codes.fill_null(-1).to_numpy().astype(np.int32) + 1
    ops = level == FRAMEWORK
    indices[ops] = by_name[names.indices.to_numpy(zero_copy_only=False)[ops]]
    # NCCL's kernels and the backends' annotations (gloo:all_reduce); not copies or sets
    kernels_or_annotations = np.isin(indices, [position["kernel"], position["annotation"]])
    indices[kernels_or_annotations & collective] = position[COMMUNICATION]
    indices[level == MODEL] = 0
    return pa.DictionaryArray.from_arrays(pa.array(indices), pa.array(vocabulary))


def _from_launching_op(
    values: pa.ChunkedArray, parent: np.ndarray, launched: np.ndarray
) -> pa.Array:
    """``values``, where a ``launched`` kernel lacks its own taken from the op around its
    launch call (its parent's parent: ``record_param_comms``, on which Kineto records a
    collective's message size; newer Kineto copies it onto the kernel as well)."""
    own = values.combine_chunks()
    missing = np.flatnonzero(launched & own.is_null().to_numpy(zero_copy_only=False))
    if len(missing) == 0:
        return own
    launch_call = np.where(parent[missing] >= 0, parent[missing], missing)
    op = np.where(parent[launch_call] >= 0, parent[launch_call], launch_call)
    inherited = pc.take(own, pa.array(op))
    filled = own.fill_null(0).to_numpy(zero_copy_only=False).copy()
    valid = own.is_valid().to_numpy(zero_copy_only=False).copy()
    filled[missing] = inherited.fill_null(0).to_numpy(zero_copy_only=False)
    valid[missing] = inherited.is_valid().to_numpy(zero_copy_only=False)
    return pa.array(filled, type=own.type, mask=~valid)


def _devices(gpus: pa.ChunkedArray) -> pa.DictionaryArray:
    """Each GPU activity's device, cuda:N (from its ``gpu``); null for the rest."""
    numbers = gpus.combine_chunks()
    present = sorted(set(pc.unique(numbers.drop_null()).to_pylist()))
    values = pa.array([f"cuda:{n}" for n in present], pa.string())
    indices = pc.index_in(numbers, pa.array(present, numbers.type))
    return pa.DictionaryArray.from_arrays(indices, values)


def _scatter(count: int, seq: np.ndarray, values: pa.ChunkedArray) -> np.ndarray:
    """``values`` placed at rows ``seq`` of a ``count``-long array; -1 where none."""
    out = np.full(count, -1, dtype=np.int64)
    out[seq] = values.fill_null(-1).to_numpy()
    return out


def _hex_ids(prefix: str, numbers: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """``prefix`` (8 hex digits) and each number as 8 more: 16-character span ids, built as
    one byte matrix; null where ``valid`` is false."""
    count = len(numbers)
    text = np.empty((count, 16), dtype=np.uint8)
    text[:, :8] = np.frombuffer(prefix.encode(), dtype=np.uint8)
    big_endian = numbers.astype(">u4").view(np.uint8).reshape(count, 4)
    nibbles = text[:, 8:].reshape(count, 4, 2)
    np.right_shift(big_endian, 4, out=nibbles[:, :, 0])
    np.bitwise_and(big_endian, 0xF, out=nibbles[:, :, 1])
    text[:, 8:] += ord("0") + (text[:, 8:] > 9) * np.uint8(ord("a") - ord("0") - 10)
    offsets = np.arange(0, 16 * (count + 1), 16, dtype=np.int32)
    if valid is None:
        return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(text))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = int(count - np.count_nonzero(valid))
    return pa.StringArray.from_buffers(
        count, pa.py_buffer(offsets), pa.py_buffer(text), bitmap, nulls
    )
