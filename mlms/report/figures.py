"""Plotly figures, each drawn from one table of ``mlms.analysis`` (already narrowed to one
evaluation where the caller says so). Nothing here computes a measurement: the functions pick
columns, label points and draw; the roofline's ceilings are the peaks drawn as lines.
"""

from __future__ import annotations

import itertools

import pandas as pd
import plotly.colors
import plotly.graph_objects as go
import plotly.io
from plotly.subplots import make_subplots

from mlms.tracer.counters import Peaks
from mlms.tracer.levels import TraceLevel

_LAYOUT = {
    "template": "plotly_white",
    "height": 380,
    "margin": {"l": 60, "r": 20, "t": 56, "b": 50},
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    "font": {"size": 12},
}
#: The axes of two plots side by side, as plotly's ``make_subplots`` lays them out (once).
_PAIR = {
    name: axis
    for name, axis in make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    .layout.to_plotly_json()
    .items()
    if name != "template"
}
#: ``_LAYOUT``'s template as plotly resolves it, for the figures built without validation.
_TEMPLATE = plotly.io.templates[_LAYOUT["template"]].to_plotly_json()
_ROOF_COLORS = {"fp32": "#555555", "tensor": "#b8860b"}
_POINT_COLORS = {True: "#e45756", False: "#4c78a8"}  # tensor-core work, other work
_PALETTE = plotly.colors.qualitative.Plotly
#: One colour per kind of span, the same in every timeline; unknown kinds take the palette's.
_KIND_COLORS = {
    "model": "#b8c2cc",
    "conv": "#4c78a8",
    "batchnorm": "#f58518",
    "relu": "#54a24b",
    "activation": "#54a24b",
    "pool": "#b279a2",
    "gemm": "#e45756",
    "add": "#72b7b2",
    "mul": "#72b7b2",
    "concat": "#eeca3b",
    "softmax": "#ff9da6",
    "dropout": "#9d755d",
    "reshape": "#8c8c8c",
    "pad": "#8c8c8c",
    "other": "#5f5f5f",
    "cudnn": "#0b84a5",
    "runtime": "#2ca02c",
    "driver": "#8c564b",
    "kernel": "#1f77b4",
    "communication": "#ff7f0e",
    "memcpy": "#d62728",
    "memset": "#9467bd",
}


def _layout(title: str, **layout: object) -> dict[str, object]:
    return {**_LAYOUT, **layout, "title": {"text": title, "x": 0, "xanchor": "left", "y": 0.98}}


def _styled(fig: go.Figure, title: str, **layout: object) -> go.Figure:
    return fig.update_layout(_layout(title, **layout))


def _pair(traces: list[dict], title: str, batch: dict, **layout: object) -> go.Figure:
    """Two plots side by side over the same batch-size axis (``batch``; ``_PAIR``'s axes; a
    trace on the right one names ``x2`` and ``y2``), built from plain dicts and not validated:
    validating copies the template deeply, 60 ms a figure against 2 ms for the rest, and these
    few dicts are fixed here (``tests/test_report.py`` checks them against a validated copy)."""
    layout |= {"xaxis": batch, "xaxis2": batch, "template": _TEMPLATE}
    axes = {name: {**_PAIR[name], **layout.pop(name, {})} for name in _PAIR}
    return go.Figure({"data": traces, "layout": _layout(title, **axes, **layout)}, _validate=False)


def _line(x: list, y: list, name: str, right: bool = False, **extra: object) -> dict:
    """A lines-and-markers trace of ``_pair``'s left plot, or of its right one."""
    axes = {"xaxis": "x2", "yaxis": "y2"} if right else {"xaxis": "x", "yaxis": "y"}
    return {"type": "scatter", "x": x, "y": y, "name": name, "mode": "lines+markers"} | extra | axes


def _layer_labels(table: pd.DataFrame) -> pd.Series:
    """``"3 layer1.0.conv1"``: execution slot and name, unique per layer."""
    return table["layer_index"].astype(str) + " " + table["name"].astype(str)


def _by_batch(table: pd.DataFrame, column: str = "batch_size"):
    return table.groupby(column, sort=True)


def latency_and_throughput(table: pd.DataFrame) -> go.Figure:
    """From ``latency_by_batch``: p50 with p90 and p99, and throughput, against batch size."""
    sizes = table["batch size"].tolist()
    traces = [
        _line(sizes, table[column].tolist(), column.split()[0], line={"dash": dash})
        for column, dash in (("p50 (ms)", "solid"), ("p90 (ms)", "dash"), ("p99 (ms)", "dot"))
    ]
    traces.append(_line(sizes, table["throughput (inputs/s)"].tolist(), "throughput", right=True))
    return _pair(
        traces,
        "Latency and throughput vs batch size",
        {"title": {"text": "batch size"}, "type": "log", "tickvals": sizes},
        yaxis={"title": {"text": "latency (ms)"}, "rangemode": "tozero"},
        yaxis2={"title": {"text": "throughput (inputs/s)"}, "rangemode": "tozero"},
    )


def energy_by_batch(table: pd.DataFrame) -> go.Figure:
    """From ``energy_by_batch``: joules per inference, and the average, peak and idle watts,
    against batch size."""
    sizes = table["batch size"].tolist()
    per_inference = _line(
        sizes,
        table["J/inference"].tolist(),
        "J/inference",
        customdata=table["inferences/J"].tolist(),
        hovertemplate="%{y:.4g} J per inference (%{customdata:.4g} inferences/J)",
    )
    power = (
        _line(
            sizes, table[column].tolist(), column.split()[0] + " power", True, line={"dash": dash}
        )
        for column, dash in (("average (W)", "solid"), ("peak (W)", "dash"), ("idle (W)", "dot"))
    )
    return _pair(
        [per_inference, *power],
        "Energy per inference and power vs batch size",
        {"title": {"text": "batch size"}, "type": "log", "tickvals": sizes},
        yaxis={"title": {"text": "energy per inference (J)"}, "type": "log"},
        yaxis2={"title": {"text": "power (W)"}, "rangemode": "tozero"},
    )


def leveled_overheads(table: pd.DataFrame) -> go.Figure:
    """From ``leveled_overheads`` (one evaluation): each leveled run's slowdown per batch size."""
    fig = go.Figure()
    for level, rows in table.groupby("level", sort=False):
        fig.add_bar(
            x=rows["batch size"].astype(str).tolist(),
            y=rows["overhead (x)"].tolist(),
            name=str(level),
            customdata=rows[["p50 (ms)", "spans"]].to_numpy().tolist(),
            hovertemplate="%{y:.2f}x  (p50 %{customdata[0]:.3f} ms, %{customdata[1]} spans)",
        )
    fig.add_hline(y=1, line_dash="dot", line_color="#888888")
    fig.update_xaxes(title_text="batch size", type="category")
    fig.update_yaxes(title_text="slowdown vs model-level run (x)", rangemode="tozero")
    # Up to five levels: above the plot their legend wraps into the title on a narrow page.
    legend = {"orientation": "v", "x": 1.02, "y": 1, "yanchor": "top"}
    return _styled(
        fig, "Profiling overhead per trace level", barmode="group", height=330, legend=legend
    )


def layer_latency(table: pd.DataFrame) -> go.Figure:
    """From ``layer_table``: each layer's median latency in execution order, per batch size."""
    fig = go.Figure()
    for batch_size, rows in _by_batch(table):
        fig.add_bar(
            x=_layer_labels(rows).tolist(),
            y=rows["latency (ms)"].tolist(),
            name=f"batch {batch_size}",
            customdata=rows[["kind", "iqr (ms)"]].to_numpy().tolist(),
            hovertemplate="%{x} (%{customdata[0]})<br>median %{y:.4f} ms, "
            "iqr %{customdata[1]:.4f} ms",
        )
    fig.update_xaxes(title_text="layer (execution order)", type="category", tickangle=-60)
    fig.update_yaxes(title_text="median latency (ms)")
    return _styled(fig, "Latency per layer", barmode="group", height=440, showlegend=True)


def layer_boxes(executions: pd.DataFrame) -> go.Figure:
    """From ``layer_executions``: the distribution of each layer's latency over the predicts."""
    fig = go.Figure()
    for batch_size, rows in _by_batch(executions):
        fig.add_box(
            x=_layer_labels(rows).tolist(),
            y=rows["latency (ms)"].tolist(),
            name=f"batch {batch_size}",
            boxpoints="outliers",
            line={"width": 1},
        )
    fig.update_xaxes(title_text="layer (execution order)", type="category", tickangle=-60)
    fig.update_yaxes(title_text="latency (ms)")
    return _styled(
        fig, "Latency distribution per layer", boxmode="group", height=440, showlegend=True
    )


def layer_types(table: pd.DataFrame) -> go.Figure:
    """From ``layer_types``: summed median latency per layer type, per batch size."""
    fig = go.Figure()
    for batch_size, rows in _by_batch(table):
        fig.add_bar(
            x=rows["kind"].tolist(),
            y=rows["latency (ms)"].tolist(),
            name=f"batch {batch_size}",
            customdata=rows[["share (%)", "layers"]].to_numpy().tolist(),
            hovertemplate="%{x}: %{y:.4f} ms, %{customdata[0]:.1f}% of layer time "
            "(%{customdata[1]} layers)",
        )
    fig.update_xaxes(title_text="layer type", type="category")
    fig.update_yaxes(title_text="latency (ms, sum of layer medians)")
    return _styled(fig, "Latency by layer type", barmode="group", showlegend=True)


def gpu_split(table: pd.DataFrame, batch_size: int) -> go.Figure:
    """From ``layer_kernels`` at one batch size: GPU and non-GPU time of each layer, stacked,
    in execution order."""
    rows = table.sort_values("layer_index")
    labels = _layer_labels(rows).tolist()
    fig = go.Figure()
    for column, name, color in (
        ("gpu (us)", "GPU (kernels, copies)", "#2f6fde"),
        ("non-gpu (us)", "non-GPU (framework, host, launch)", "#e8833a"),
    ):
        fig.add_bar(x=labels, y=rows[column].tolist(), name=name, marker_color=color)
    fig.update_xaxes(title_text="layer (execution order)", type="category", tickangle=-60)
    fig.update_yaxes(title_text="median time per predict (us)")
    return _styled(
        fig, f"GPU vs non-GPU time per layer, batch {batch_size}", barmode="stack", height=440
    )


def top_kernels(table: pd.DataFrame) -> go.Figure:
    """From ``kernel_breakdown`` (top kernels): GPU time per predict of each, per batch size."""
    fig = go.Figure()
    for batch_size, rows in _by_batch(table):
        fig.add_bar(
            y=[f"{rank}. {kernel}" for rank, kernel in enumerate(rows["kernel"], start=1)],
            x=rows["gpu (us)"].tolist(),
            orientation="h",
            name=f"batch {batch_size}",
            customdata=rows[["share (%)", "calls"]].to_numpy().tolist(),
            hovertemplate="%{y}<br>%{x:.2f} us per predict, %{customdata[0]:.1f}% of kernel "
            "time, %{customdata[1]} calls",
        )
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_xaxes(title_text="GPU time per predict (us)")
    return _styled(fig, "Kernels with the most GPU time", height=120 + 22 * len(table))


def roofline(points: pd.DataFrame, peaks: Peaks | None, at: str) -> go.Figure:
    """From ``roofline`` at ``at`` (kernel, layer or model): achieved GFLOP/s against
    arithmetic intensity, log-log, marker area by GPU time, under the fp32 and tensor-core
    ceilings of ``peaks`` (bandwidth slope up to each peak). Points without an intensity (no
    DRAM bytes counted) cannot sit on the plot and stay in the table only."""
    label = {"kernel": "kernel", "layer": "name", "model": "batch_size"}[at]
    points = points.dropna(subset=["flop/byte", "GFLOP/s"])
    fig = go.Figure()
    largest = float(points["gpu (us)"].max()) if not points.empty else 1.0
    for tensor, rows in points.groupby("tensor", sort=True, dropna=False):
        tensor = bool(tensor) if pd.notna(tensor) else False
        names = rows[label].astype(str)
        if at == "model":
            names = "batch " + names
        fig.add_scatter(
            x=rows["flop/byte"].tolist(),
            y=rows["GFLOP/s"].tolist(),
            mode="markers",
            name="tensor-core work" if tensor else "other work",
            text=names.tolist(),
            customdata=rows["gpu (us)"].tolist(),
            hovertemplate="%{text}<br>%{x:.3g} flop/byte, %{y:.4g} GFLOP/s, "
            "%{customdata:.2f} us per predict<extra></extra>",
            marker={
                "color": _POINT_COLORS[tensor],
                "size": rows["gpu (us)"].tolist(),
                "sizemode": "area",
                "sizeref": 2 * largest / 30**2,
                "sizemin": 4,
                "line": {"width": 1, "color": "#ffffff"},
            },
        )
    if peaks is not None:
        low = min([*points["flop/byte"], peaks.flops_fp32 / peaks.dram_bytes_per_s]) / 10
        high = max([*points["flop/byte"], peaks.flops_tensor / peaks.dram_bytes_per_s]) * 10
        for name, peak in (("fp32", peaks.flops_fp32), ("tensor", peaks.flops_tensor)):
            ridge = peak / peaks.dram_bytes_per_s
            fig.add_scatter(
                x=[low, ridge, high],
                y=[low * peaks.dram_bytes_per_s / 1e9, peak / 1e9, peak / 1e9],
                mode="lines",
                name=f"{name} ceiling ({peak / 1e12:.1f} TFLOP/s, "
                f"{peaks.dram_bytes_per_s / 1e12:.2f} TB/s)",
                line={"color": _ROOF_COLORS[name], "dash": "dash" if name == "fp32" else "solid"},
                hoverinfo="skip",
            )
    fig.update_xaxes(title_text="arithmetic intensity (flop per DRAM byte)", type="log", dtick=1)
    fig.update_yaxes(title_text="achieved GFLOP/s", type="log", dtick=1)
    legend = {"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0, "itemsizing": "constant"}
    return _styled(
        fig, f"Roofline per {at}", height=480, legend=legend, margin={**_LAYOUT["margin"], "b": 130}
    )


def timeline(table: pd.DataFrame, batch_size: int) -> go.Figure:
    """From ``iteration_timeline``: one predict, one row per trace level, one colour per kind
    of span; GPU work at its own timestamps."""
    fig = go.Figure()
    levels = [TraceLevel(int(level)).label for level in sorted(table["level"].unique())]
    for index, ((level, kind), rows) in enumerate(
        table.groupby(["level", "kind"], sort=True, dropna=False)
    ):
        fig.add_bar(
            y=[TraceLevel(int(level)).label] * len(rows),
            x=rows["duration (us)"].tolist(),
            base=rows["start (us)"].tolist(),
            orientation="h",
            name=str(kind),
            text=rows["name"].astype(str).tolist(),
            textposition="none",
            hovertemplate="%{text}<br>from %{base:.1f} us, %{x:.1f} us long"
            "<extra>%{fullData.name}</extra>",
            marker_color=_KIND_COLORS.get(str(kind), _PALETTE[index % len(_PALETTE)]),
        )
    fig.update_yaxes(categoryorder="array", categoryarray=levels[::-1], title_text="level")
    fig.update_xaxes(title_text="time since the predict began (us)")
    return _styled(
        fig,
        f"One predict (the median one) at batch {batch_size}",
        barmode="overlay",
        height=180 + 60 * len(levels),
        legend={"orientation": "v", "x": 1.01, "y": 1, "yanchor": "top"},
    )


def side_by_side(table: pd.DataFrame) -> go.Figure:
    """From ``compare_frameworks``: p50 latency and throughput per batch size, one bar per
    evaluation."""
    traces = []
    groups = table.groupby(["evaluation", "framework", "version"], sort=False)
    for color, ((evaluation, framework, version), rows) in zip(itertools.cycle(_PALETTE), groups):
        name = f"{framework} {version} ({evaluation[:8]})"
        sizes = rows["batch size"].astype(str).tolist()
        for axes, column in (("", "p50 (ms)"), ("2", "throughput (inputs/s)")):
            traces.append(
                {
                    "type": "bar",
                    "x": sizes,
                    "y": rows[column].tolist(),
                    "name": name,
                    "legendgroup": name,
                    "showlegend": not axes,
                    "marker": {"color": color},
                    "xaxis": f"x{axes}",
                    "yaxis": f"y{axes}",
                }
            )
    return _pair(
        traces,
        "Side by side per batch size",
        {"title": {"text": "batch size"}, "type": "category"},
        yaxis={"title": {"text": "p50 (ms)"}},
        yaxis2={"title": {"text": "throughput (inputs/s)"}},
        barmode="group",
    )


def differences(table: pd.DataFrame, labels: pd.Series, column: str, title: str) -> go.Figure:
    """From ``layer_differences`` or ``kernel_differences`` (rows with a difference): the
    difference (other minus base) of each row, ranked largest first (ranks keep equal short
    names apart), slower in red and faster in green."""
    rows = table.assign(label=labels)
    colors = ["#c0392b" if value > 0 else "#2e8b57" for value in rows[column]]
    fig = go.Figure(
        go.Bar(
            y=[f"{rank}. {text}" for rank, text in enumerate(rows["label"], start=1)],
            x=rows[column].tolist(),
            orientation="h",
            marker_color=colors,
            name=column,
        )
    )
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_xaxes(title_text=f"{column}: other minus base", zeroline=True)
    return _styled(fig, title, height=120 + 22 * len(rows), showlegend=False)


def lower_bounds(summary: pd.DataFrame, batch_size: int) -> go.Figure:
    """From ``bound_summary`` at one batch size: the measured latency, the sequential and
    parallel lower bounds, and each what-if's latency, one bar each."""
    row = summary.iloc[0]
    bars = [
        ("measured", "measured (ms)", "#4c78a8"),
        ("sequential LBL", "sequential LBL (ms)", "#54a24b"),
        ("parallel LBL", "parallel LBL (ms)", "#2e8b57"),
    ]
    bars += [
        (str(column).removesuffix(" (ms)"), column, "#f58518")  # "if fusion (ms)"
        for column in summary.columns
        if str(column).startswith("if ") and str(column).endswith(" (ms)") and pd.notna(row[column])
    ]
    measured = float(row["measured (ms)"])
    values = [float(row[column]) for _name, column, _color in bars]
    fig = go.Figure(
        go.Bar(
            x=[name for name, _column, _color in bars],
            y=values,
            marker_color=[color for _name, _column, color in bars],
            customdata=[value / measured if measured > 0 else None for value in values],
            hovertemplate="%{x}: %{y:.4f} ms (%{customdata:.3f} of measured)<extra></extra>",
            name="latency",
        )
    )
    fig.add_hline(y=measured, line_dash="dot", line_color="#888888")
    fig.update_xaxes(title_text="measured, lower bounds, and latency if ...", type="category")
    fig.update_yaxes(title_text="latency (ms)", rangemode="tozero")
    return _styled(fig, f"Latency against its lower bounds, batch {batch_size}", showlegend=False)


def layers_against_bounds(table: pd.DataFrame, batch_size: int) -> go.Figure:
    """From ``slowest_layers`` of a bound at one batch size: each layer's measured time beside
    its lower bound, slowest first (ranks keep equal names apart)."""
    labels = [f"{rank}. {layer}" for rank, layer in enumerate(table["layer"], start=1)]
    custom = table[["kind", "fastest", "measured/bound"]].to_numpy().tolist()
    fig = go.Figure()
    for column, name, color in (
        ("measured (ms)", "measured", "#4c78a8"),
        ("bound (ms)", "bound (fastest implementation)", "#54a24b"),
    ):
        fig.add_bar(
            y=labels,
            x=table[column].tolist(),
            orientation="h",
            name=name,
            marker_color=color,
            customdata=custom,
            hovertemplate="%{y} (%{customdata[0]})<br>%{x:.4f} ms; fastest %{customdata[1]}, "
            "measured/bound %{customdata[2]:.2f}<extra>%{fullData.name}</extra>",
        )
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_xaxes(title_text="time per predict (ms)", rangemode="tozero")
    # Slowest first: the bottom right, past the shortest bars, is free for the legend.
    legend = {
        "orientation": "v",
        "x": 0.99,
        "xanchor": "right",
        "y": 0.01,
        "yanchor": "bottom",
        "bgcolor": "rgba(255,255,255,0.85)",
    }
    return _styled(
        fig,
        f"Slowest layers against their bounds, batch {batch_size}",
        barmode="group",
        height=140 + 34 * len(table),
        legend=legend,
    )


def rank_breakdown(table: pd.DataFrame) -> go.Figure:
    """From ``rank_breakdown``: each rank's time split into compute, communication, memory,
    other and idle (% of the span of its activity), stacked, one bar per rank and batch size."""
    labels = [
        f"rank {r}, batch {b}" for r, b in zip(table["rank"], table["batch_size"], strict=True)
    ]
    fig = go.Figure()
    for part, color in (
        ("compute", _KIND_COLORS["gemm"]),
        ("communication", _KIND_COLORS["communication"]),
        ("memory", _KIND_COLORS["memcpy"]),
        ("other", _KIND_COLORS["other"]),
        ("idle", "#d9d9d9"),
    ):
        fig.add_bar(
            x=labels,
            y=table[f"{part} (%)"].tolist(),
            name=part,
            marker_color=color,
            customdata=table[f"{part} (us)"].tolist(),
            hovertemplate=f"%{{x}}: {part} %{{y:.1f}}% (%{{customdata:,.1f}} us)",
        )
    fig.update_xaxes(type="category")
    fig.update_yaxes(title_text="% of the span of the rank's activity", range=[0, 100])
    return _styled(fig, "Time per rank (temporal breakdown)", barmode="stack")
