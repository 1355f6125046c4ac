"""The span analyses by name: what ``mlms analyze``, the server's ``Analyze`` RPC and programs
ask for, one table each, from the same functions the report draws."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from mlms.analysis import distributed, kernels, layers
from mlms.analysis.engine import Spans
from mlms.errors import InvalidArgument
from mlms.evaluation.record_store import load_record
from mlms.store.base import ObjectStore


@dataclass(frozen=True)
class Analysis:
    function: Callable[..., pd.DataFrame]
    #: Takes ``top`` (rows kept per batch size) as its second argument.
    ranks: bool = False


ANALYSES: dict[str, Analysis] = {
    "layer_table": Analysis(layers.layer_table),
    "slowest_layers": Analysis(layers.slowest_layers, ranks=True),
    "layer_executions": Analysis(layers.layer_executions),
    "layer_types": Analysis(layers.layer_types),
    "model_costs": Analysis(layers.model_costs),
    "kernel_table": Analysis(kernels.kernel_table),
    "kernel_breakdown": Analysis(kernels.kernel_breakdown, ranks=True),
    "layer_kernels": Analysis(kernels.layer_kernels),
    "predict_kernel_time": Analysis(kernels.predict_kernel_time),
    "roofline_kernel": Analysis(lambda spans: kernels.roofline(spans, "kernel")),
    "roofline_layer": Analysis(lambda spans: kernels.roofline(spans, "layer")),
    "roofline_model": Analysis(lambda spans: kernels.roofline(spans, "model")),
    "trace_ranks": Analysis(distributed.trace_ranks),
    "rank_breakdown": Analysis(distributed.rank_breakdown),
    "comm_overlap": Analysis(distributed.comm_overlap),
    "rank_skew": Analysis(distributed.rank_skew),
    "collectives": Analysis(distributed.collectives),
}


def analyze(spans: Spans, name: str, top: int | None = None) -> pd.DataFrame:
    """The table of the analysis called ``name`` over ``spans``."""
    analysis = known(name)
    if top is not None and top < 1:
        raise InvalidArgument(f"top {top}: expected a positive number of rows")
    if analysis.ranks and top is not None:
        return analysis.function(spans, top)
    return analysis.function(spans)


def known(name: str) -> Analysis:
    analysis = ANALYSES.get(name)
    if analysis is None:
        raise InvalidArgument(
            f"unknown analysis {name!r}: expected one of {', '.join(sorted(ANALYSES))}"
        )
    return analysis


def analyze_stored(
    store: ObjectStore, evaluation_ids: Sequence[str], names: Sequence[str], top: int | None = None
) -> dict[str, pd.DataFrame]:
    """The analyses ``names`` over the traces of stored evaluations (ids or unique prefixes),
    in one engine (its tables derived once)."""
    if not evaluation_ids:
        raise InvalidArgument("no evaluation ids: expected at least one")
    records = {r.id: r for r in (load_record(store, i) for i in evaluation_ids)}.values()
    untraced = [r.id for r in records if r.trace_id is None]
    if untraced:
        raise InvalidArgument(
            f"evaluation {untraced[0]} has no trace (trace level no_trace): nothing to analyse"
        )
    for name in names:
        known(name)
    spans = Spans.from_store(store, [r.trace_id for r in records if r.trace_id])
    return {name: analyze(spans, name, top) for name in names}


def to_ipc(table: pd.DataFrame) -> bytes:
    """A table as an Arrow IPC stream (what the ``Analyze`` RPC sends)."""
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, arrow.schema) as writer:
        writer.write_table(arrow)
    return sink.getvalue()


def from_ipc(data: bytes) -> pd.DataFrame:
    return pa.ipc.open_stream(data).read_all().to_pandas()
