"""The report's sections per level (model, layer, kernel, timeline), one part per evaluation.

Each part calls the analyses of ``mlms.analysis`` on that evaluation's own spans (``own_spans``),
lays their tables out and plots them (``mlms.report.figures``). Where the data does not exist
(no trace, no layers, no GPU, no counters) the part says so in one line instead of drawing an
empty plot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from mlms.analysis import kernels, layers, model, timeline
from mlms.analysis.engine import Spans
from mlms.evaluation.conditions import unsteady
from mlms.evaluation.record import EvaluationRecord
from mlms.report import figures
from mlms.report.html import absent, collapsed, figure, grid, heading, note, table
from mlms.tracer.levels import TraceLevel

TOP = 10  # slowest layers, and layers with the most non-GPU time, per batch size
TOP_KERNELS = 15
NOT_TRACED = "no trace was recorded (trace level no_trace)"

#: Blocks of one evaluation at one level: (record, its own spans or None, its index) -> HTML.
Part = Callable[[EvaluationRecord, Spans | None, int], list[str]]


class Level(NamedTuple):
    title: str
    anchor: str
    question: str
    part: Part


def own_spans(spans: Spans, record: EvaluationRecord) -> Spans | None:
    """The spans of ``record``'s trace alone (None when it has none), so that every analysis
    and plot of this part describes this evaluation only."""
    if record.trace_id is None:
        return None
    traces = spans.scalar("SELECT list(DISTINCT trace_id) FROM spans")
    if traces == [record.trace_id]:
        return spans
    return Spans(spans.arrow("SELECT * FROM spans WHERE trace_id = ?", [record.trace_id]))


def below_model(record: EvaluationRecord) -> bool:
    """Whether ``record`` was traced below the model level: a shallower trace has no layer or
    kernel, so the pages ask no query for them (a sweep's records are a site's hundreds).
    Kernels come from the framework level on (jax's reads XLA's through CUPTI there)."""
    return TraceLevel.parse(record.trace_level) >= TraceLevel.FRAMEWORK


def parts_spans(spans: Spans, records: Sequence[EvaluationRecord]) -> list[Spans | None]:
    """Each record's spans for its level parts: its own (``own_spans``), or, for a trace with
    no span below the model level, one empty ``Spans`` shared by them. Every part reads layers,
    kernels or a layer run, none of which such a trace has, so the empty one answers each part
    alike without deriving the trace's tables once more (a sweep's records are such traces)."""
    traced = [r.trace_id for r in records if r.trace_id is not None]
    shallow = set(
        spans.arrow(
            "SELECT trace_id FROM spans WHERE list_contains(?, trace_id) "
            f"GROUP BY trace_id HAVING max(level) <= {int(TraceLevel.MODEL)}",
            [traced],
        )["trace_id"].to_pylist()
        if traced
        else ()
    )
    empty = Spans.from_tables([]) if shallow else None
    return [empty if r.trace_id in shallow else own_spans(spans, r) for r in records]


def model_part(record: EvaluationRecord, spans: Spans | None, index: int) -> list[str]:
    """Latency and throughput per batch size (with the record's warnings), the leveled runs'
    overheads and the model's size."""
    latency = model.latency_by_batch(record)
    if latency.empty:
        return [absent(f"no results: the evaluation's status is {record.status}")]
    blocks = [
        figure(figures.latency_and_throughput(latency), f"latency-{index}"),
        table(latency, "latency per batch size", table_id=f"latency-table-{index}"),
    ]
    for result in record.results:
        if result.latency_ms.warning:
            blocks.append(note(f"batch size {result.batch_size}: {result.latency_ms.warning}"))
        if result.conditions is not None and (why := unsteady(result.conditions)):
            blocks.append(note(f"batch size {result.batch_size}: {why}"))
        blocks.extend(
            note(
                f"batch size {result.batch_size}, {level} run: the profiler dropped "
                f"{run.dropped} records; its spans are incomplete"
            )
            for level, run in result.levels.items()
            if run.dropped
        )
    blocks.extend(_energy_blocks(record, index))
    overheads = model.leveled_overheads([record])
    if any(TraceLevel.parse(level) > TraceLevel.MODEL for level in overheads["level"]):
        blocks.append(
            grid(
                [
                    figure(figures.leveled_overheads(overheads), f"overheads-{index}"),
                    table(overheads.drop(columns="evaluation"), "leveled runs"),
                ]
            )
        )
    elif TraceLevel.parse(record.trace_level) <= TraceLevel.MODEL:
        blocks.append(
            absent(
                f"no profiling overhead to show: trace level {record.trace_level} runs only the "
                "model-level run (evaluate with --trace-level framework or deeper)"
            )
        )
    else:
        blocks.append(absent("no profiling overhead to show: the record has no leveled runs"))
    if spans is not None and below_model(record):
        costs = layers.model_costs(spans)
        if not costs.empty and costs["GMACs"].notna().any():
            blocks.append(table(costs.drop(columns="trace_id"), "model size per predict"))
    return blocks


def _energy_blocks(record: EvaluationRecord, index: int) -> list[str]:
    """Energy and efficiency per batch size, why a batch size has none, and what the machine
    did beside each run (its conditions)."""
    energy = model.energy_by_batch(record)
    blocks = []
    if not energy.empty:
        blocks.append(
            grid(
                [
                    figure(figures.energy_by_batch(energy), f"energy-{index}"),
                    table(
                        energy,
                        "energy per batch size (the model-level run; joules from the device's "
                        "energy counter)",
                        table_id=f"energy-table-{index}",
                    ),
                ]
            )
        )
    blocks.extend(absent(f"no energy for {reason}") for reason in model.energy_reasons(record))
    conditions = model.conditions_by_batch(record)
    if not conditions.empty:
        blocks.append(
            table(
                conditions,
                "run conditions per batch size (the model-level run; the SM clock read with the "
                "power, the host's CPU steal from /proc/stat)",
                table_id=f"conditions-table-{index}",
            )
        )
    return blocks


def layer_part(record: EvaluationRecord, spans: Spans | None, index: int) -> list[str]:
    """Each layer's latency and its spread, latency by layer type, the slowest layers."""
    if spans is None:
        return [absent(NOT_TRACED)]
    per_layer = layers.layer_table(spans) if below_model(record) else None
    if per_layer is None or per_layer.empty:
        return [
            absent(
                f"no layer spans at trace level {record.trace_level}: evaluate with "
                "--trace-level framework or deeper for layers"
            )
        ]
    kinds = layers.layer_types(spans)
    return [
        figure(figures.layer_latency(per_layer), f"layer-latency-{index}"),
        figure(figures.layer_boxes(layers.layer_executions(spans)), f"layer-box-{index}"),
        figure(figures.layer_types(kinds), f"layer-types-{index}"),
        table(kinds.drop(columns="trace_id"), "latency by layer type"),
        table(
            layers.slowest_layers(spans, TOP).drop(columns="trace_id"),
            f"slowest {TOP} layers per batch size (median over predicts)",
        ),
        collapsed(
            f"all {len(per_layer)} layer rows (shapes, parameters, MACs, memory, spread)",
            table(per_layer.drop(columns="trace_id")),
        ),
    ]


def kernel_part(record: EvaluationRecord, spans: Spans | None, index: int) -> list[str]:
    """The kernels with the most GPU time, each layer's GPU and non-GPU time, rooflines."""
    if spans is None:
        return [absent(NOT_TRACED)]
    split = kernels.layer_kernels(spans) if below_model(record) else None
    if split is None or split.empty:
        return [
            absent(
                f"no GPU kernels in this trace (device {record.device}, trace level "
                f"{record.trace_level}): kernels need a GPU evaluation at --trace-level "
                "hardware or full"
            )
        ]
    top = kernels.kernel_breakdown(spans, TOP_KERNELS)
    blocks = [
        heading("Kernels"),
        figure(figures.top_kernels(top), f"kernels-top-{index}"),
        table(
            top.drop(columns=["trace_id", "name"]),
            f"top {TOP_KERNELS} kernels by GPU time per predict",
        ),
        heading("GPU and non-GPU time per layer"),
    ]
    blocks.extend(
        figure(figures.gpu_split(rows, batch_size), f"gpu-split-{index}-bs{batch_size}")
        for batch_size, rows in split.groupby("batch_size", sort=True)
    )
    blocks.append(
        table(
            split.groupby("batch_size").head(TOP).drop(columns="trace_id"),
            f"{TOP} layers with the most non-GPU time per batch size (medians over predicts; "
            "bound: the roofline side of most of the layer's kernel time)",
        )
    )
    return [*blocks, heading("Rooflines"), *_rooflines(record, spans, index)]


def _rooflines(record: EvaluationRecord, spans: Spans, index: int) -> list[str]:
    """Model, layer and kernel rooflines under the peaks the trace recorded."""
    points = {at: kernels.roofline(spans, at) for at in ("model", "layer", "kernel")}
    if all(frame.empty for frame in points.values()):
        return [
            absent(
                f"no hardware counters at trace level {record.trace_level}: rooflines need "
                "--trace-level full (Nsight Compute's ncu)"
            )
        ]
    peaks = kernels.peaks_of(spans, record.trace_id)
    blocks = [] if peaks else [note("no measured peaks in this trace: ceilings not drawn")]
    blocks.append(
        grid(
            [
                figure(figures.roofline(frame, peaks, at), f"roofline-{at}-{index}")
                for at, frame in points.items()
            ]
        )
    )
    blocks.append(table(points["model"].drop(columns="trace_id"), "the whole model per predict"))
    return blocks


def timeline_part(record: EvaluationRecord, spans: Spans | None, index: int) -> list[str]:
    """The median predict at the largest batch size, one row per trace level."""
    if spans is None or not record.results:
        return [absent(NOT_TRACED)]
    batch_size = max(r.batch_size for r in record.results)
    spans_of_predict = timeline.iteration_timeline(spans, record.trace_id, batch_size)
    if spans_of_predict.empty:
        return [
            absent(
                f"no layer run at trace level {record.trace_level}: evaluate with "
                "--trace-level framework or deeper for a timeline"
            )
        ]
    return [figure(figures.timeline(spans_of_predict, batch_size), f"timeline-plot-{index}")]


LEVELS = (
    Level(
        "Model level",
        "model",
        "How do latency, throughput and energy per inference scale with batch size, and what "
        "does each profiling level cost? Latencies and energy are the model-level run's (no "
        "profiler attached).",
        model_part,
    ),
    Level(
        "Layer level",
        "layers",
        "Which layers take the time, how steady are they, and which layer types dominate? "
        "Medians over the predicts of the layer run (the framework-level run, or on a GPU the "
        "kernel run with each layer's critical path).",
        layer_part,
    ),
    Level(
        "Kernel level (GPU)",
        "kernels",
        "Which GPU kernels take the device's time, where does each layer wait on the host "
        "instead of the GPU, and how close does the work come to the GPU's ceilings?",
        kernel_part,
    ),
    Level(
        "Timeline",
        "timeline",
        "What happens inside one predict, and when? The median-length predict of the layer run "
        "at the largest batch size, one row per trace level; GPU work sits at its own "
        "timestamps, so the gaps where the device waits show.",
        timeline_part,
    ),
)
