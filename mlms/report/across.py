"""The report's comparison section: several evaluations side by side, then each against the
first (the base) at every batch size they share: layers, kernels and predictions."""

from __future__ import annotations

from collections.abc import Sequence

from mlms.analysis.across import (
    Side,
    kernel_differences,
    layer_differences,
    prediction_divergence,
)
from mlms.analysis.compare import compare_frameworks
from mlms.analysis.engine import Spans
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRecord
from mlms.report import figures
from mlms.report.evaluations import label, short_label
from mlms.report.html import Section, absent, collapsed, figure, heading, note, question, table
from mlms.report.levels import below_model

SHOWN = 25  # differences plotted per comparison, largest first


def across_section(records: Sequence[EvaluationRecord], spans: Spans) -> Section:
    """How do the evaluations differ? Side by side per batch size, then each one against the
    first: predictions, then layers and kernels at each batch size both ran."""
    section = Section("Across evaluations", "across")
    section.add(
        question(
            "How do the evaluations differ: latency and throughput per batch size, which "
            "layers and kernels got slower or faster, and do they predict the same?"
        )
    )
    if len(records) < 2:
        section.add(absent("one evaluation in this report: name two or more to compare them"))
        return section
    side_by_side = compare_frameworks(records, spans)
    section.add(
        figure(figures.side_by_side(side_by_side), "across-latency"),
        table(side_by_side, "side by side", table_id="across-table"),
    )
    base = records[0]
    for index, other in enumerate(records[1:], start=1):
        part = section.child(
            f"{label(other)} vs {label(base)}",
            f"across-{index}",
            f"{short_label(other)} vs the first",
        )
        part.add(*_pair(base, other, spans, index))
    return section


def _pair(base: EvaluationRecord, other: EvaluationRecord, spans: Spans, index: int) -> list[str]:
    """Do ``other`` and ``base`` predict the same, and which layers and kernels differ?"""
    blocks = [heading("Predictions")]
    try:
        blocks.append(table(prediction_divergence(base, other), "prediction divergence"))
    except InvalidArgument as exc:
        blocks.append(absent(f"not comparable: {exc}"))
    if base.model.name != other.model.name:
        blocks.append(
            note(
                f"different models ({base.model.name} and {other.model.name}): layers are "
                "matched by type and occurrence, which pairs unrelated layers"
            )
        )
    if not (base.trace_id and other.trace_id):
        blocks.append(absent("layers and kernels need both evaluations traced; one has no trace"))
        return blocks
    shared = sorted({r.batch_size for r in base.results} & {r.batch_size for r in other.results})
    # Neither side traced below the model level: no layer or kernel to ask for.
    traced = below_model(base) or below_model(other)
    if not shared:
        blocks.append(absent("no batch size in common: layers and kernels compare per batch size"))
    for batch_size in shared:
        sides = (Side(base.trace_id, batch_size), Side(other.trace_id, batch_size))
        blocks.append(heading(f"Batch size {batch_size}"))
        blocks.extend(_layers(spans, sides, index, batch_size, traced))
        blocks.extend(_kernels(spans, sides, index, batch_size, traced))
    return blocks


def _layers(
    spans: Spans, sides: tuple[Side, Side], index: int, batch_size: int, traced: bool
) -> list[str]:
    diff = layer_differences(spans, *sides) if traced else None
    if diff is None or diff.empty:
        return [absent(f"no layer spans on either side at batch size {batch_size}")]
    shown = diff.dropna(subset=["difference (ms)"]).head(SHOWN)
    if shown.empty:
        return [
            absent(f"no layer matched by type and occurrence at batch size {batch_size}"),
            collapsed(f"all {len(diff)} layers", table(diff)),
        ]
    labels = (
        shown["kind"]
        + " #"
        + shown["occurrence"].astype(str)
        + " ("
        + shown["base layer"].astype(str)
        + " → "
        + shown["other layer"].astype(str)
        + ")"
    )
    title = f"Layer latency difference, batch {batch_size} (matched layers)"
    return [
        figure(
            figures.differences(shown, labels, "difference (ms)", title),
            f"layer-diff-{index}-bs{batch_size}",
        ),
        collapsed(
            f"all {len(diff)} rows (a layer without a match has one side empty)", table(diff)
        ),
    ]


def _kernels(
    spans: Spans, sides: tuple[Side, Side], index: int, batch_size: int, traced: bool
) -> list[str]:
    diff = kernel_differences(spans, *sides) if traced else None
    if diff is None or diff.empty:
        return [absent(f"no GPU kernels on either side at batch size {batch_size}")]
    shown = diff.head(SHOWN)
    title = f"Kernel time difference per predict, batch {batch_size}"
    return [
        figure(
            figures.differences(shown, shown["kernel"], "difference (us)", title),
            f"kernel-diff-{index}-bs{batch_size}",
        ),
        collapsed(f"all {len(diff)} kernels", table(diff.drop(columns="name"))),
    ]
