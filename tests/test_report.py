"""``mlms report``: the HTML report of real evaluations, opened in a real headless Chromium.

The evaluations are real CPU runs of digits_cnn (torch and ONNX Runtime, framework level; one
at model level and one untraced for the sections that must say why they are empty) and the H100
capture of ``tests/gpu_capture.py`` archived as a ``full`` run makes it, so the kernel sections
and rooflines draw real GPU data. The browser is Debian's chromium driven by playwright (never a
downloaded one); without it the browser tests skip and say so.

``MLMS_REPORT_SCREENSHOT=docs/report.png`` makes the single-evaluation browser test also save
the top of that report there (the README's picture).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pandas as pd
import plotly.offline
import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from mlms.analysis.engine import Spans
from mlms.analysis.kernels import peaks_of, roofline
from mlms.bounds.record import BatchBound, BoundRecord, BoundRequest, LayerBound, WhatIf
from mlms.bounds.tables import bound_summary
from mlms.cli.common_options import spans_for
from mlms.client import EmbeddedClient
from mlms.evaluation.record import (
    BatchResult,
    EvaluationRecord,
    EvaluationRequest,
    FrameworkRef,
    ModelRef,
)
from mlms.evaluation.record_store import save_record
from mlms.evaluation.runner import evaluate
from mlms.evaluation.stats import latency_stats
from mlms.hardware import GpuInfo
from mlms.report import bounds_for, build_report
from mlms.report.evaluations import label
from mlms.report.html import table
from mlms.report.levels import kernel_part
from mlms.tracer.archive import write_spans
from mlms.tracer.levels import TraceLevel
from tests import gpu_capture

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
TOP_OF_PAGE = {"width": 1400, "height": 1320}
ALL_PLOTS = """() => [...document.querySelectorAll('.plotly-graph-div')].map(d => ({
    id: d.id,
    drawn: d.classList.contains('js-plotly-plot'),
    traces: d.querySelectorAll('.main-svg .trace').length,
}))"""


def _evaluate(store, framework: str, level: str, batch_sizes: list[int]) -> EvaluationRecord:
    request = EvaluationRequest(
        model="digits_cnn",
        framework=framework,
        batch_sizes=batch_sizes,
        iterations=10,  # fewer, and the record warns that its p99 means nothing
        warmup=1,
        min_seconds=0,
        trace_level=level,
    )
    return evaluate(request, store=store)


@pytest.fixture(scope="module")
def cpu_records(store) -> list[EvaluationRecord]:
    """torch and ONNX Runtime at the framework level, batch sizes 1 and 4."""
    return [_evaluate(store, f, "framework", [1, 4]) for f in ("torch", "onnxruntime")]


@pytest.fixture(scope="module")
def shallow_records(store) -> list[EvaluationRecord]:
    """One evaluation traced at the model level only, one not traced at all."""
    return [_evaluate(store, "torch", level, [2]) for level in ("model", "no_trace")]


@pytest.fixture(scope="module")
def gpu_record(store, cpu_records) -> EvaluationRecord:
    """The H100 capture as a stored evaluation: its spans as a ``full`` run archives them
    (as in tests/test_kernel_analyses.py) and a record made here around them. The capture's
    three predicts were traced, so the record's latencies include the profilers' slowdown, and
    it has no model-level run (no leveled overheads) and no predictions."""
    capture = gpu_capture.load()
    batch_size = capture["meta"]["batch_size"]
    spans = gpu_capture.full_run(capture)
    trace_id = spans[0].trace_id
    write_spans(store, trace_id, spans)
    durations = [m["end_ns"] - m["start_ns"] for m in capture["models"]]
    base = cpu_records[0]
    gpu = GpuInfo(
        index=0,
        name=capture["meta"]["gpu"],
        alias="h100",
        memory_bytes=81559 * 2**20,  # what NVML reports for an H100 80GB HBM3
        compute_capability="9.0",
        driver="not recorded",
    )
    record = base.model_copy(
        update={
            "id": uuid.uuid4().hex,
            "request": base.request.model_copy(
                update={"model": "resnet18", "hw": "h100", "batch_sizes": [batch_size]}
            ),
            "model": ModelRef(name="resnet18", version="1.0.0"),
            "framework": FrameworkRef(name="torch", version=capture["meta"]["torch"]),
            "hardware": base.hardware.model_copy(update={"gpus": [gpu]}),
            "device": "cuda:0",
            "trace_level": TraceLevel.FULL.label,
            "trace_id": trace_id,
            "span_count": len(spans),
            "results": [
                BatchResult(
                    batch_size=batch_size,
                    iterations=len(durations),
                    seconds=sum(durations) / 1e9,
                    latency_ms=latency_stats(durations),
                    throughput=batch_size * len(durations) / (sum(durations) / 1e9),
                )
            ],
            "accuracy": None,
            "predictions": None,
        }
    )
    save_record(store, record)
    return record


def _spans(store, records: list[EvaluationRecord]) -> Spans:
    """The records' spans as ``mlms report`` gets them."""
    return spans_for(EmbeddedClient(store), records)


@pytest.fixture(scope="module")
def full_report(store, cpu_records, gpu_record, tmp_path_factory) -> tuple[Path, str]:
    """torch (the base), ONNX Runtime and the H100 capture in one report."""
    records = [*cpu_records, gpu_record]
    text = build_report(records, _spans(store, records))
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(text, encoding="utf-8")
    return path, text


def _without_plotlyjs(text: str) -> str:
    return text.replace(plotly.offline.get_plotlyjs(), "")


def _external_sources(text: str) -> list[str]:
    """``src``/``href`` attributes that point off the file (outside the inlined plotly.js)."""
    return re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//[^"'\s>]*""", text)


def test_report_lays_out_every_level_and_says_why_a_section_is_empty(full_report):
    _path, text = full_report
    assert text.count(plotly.offline.get_plotlyjs()) == 1  # inlined once
    page = _without_plotlyjs(text)
    assert _external_sources(page) == []
    assert "cdn.plot.ly" not in page
    for anchor in ("evaluations", "model", "layers", "kernels", "timeline", "across"):
        assert f'id="{anchor}"' in page and f'href="#{anchor}"' in page
    # The CPU evaluations have no kernels, and each says so in one line instead of a plot.
    assert page.count("no GPU kernels in this trace (device cpu, trace level framework)") == 2
    assert "no hardware counters" not in page  # the GPU capture has them
    # The capture has no model-level run and no predictions: said, not drawn, not crashed on.
    assert "no profiling overhead to show: the record has no leveled runs" in page
    assert "has no predictions to compare" in page
    assert "different models (digits_cnn and resnet18)" in page
    assert "NVIDIA H100 80GB HBM3" in page


def test_shallow_traces_say_why_their_sections_are_empty(store, shallow_records):
    untraced = shallow_records[1]
    assert untraced.trace_id is None
    page = _without_plotlyjs(build_report(shallow_records, _spans(store, shallow_records)))
    assert "no layer spans at trace level model" in page
    assert "no layer run at trace level model" in page
    assert page.count("no trace was recorded (trace level no_trace)") == 3  # layer, kernel, time
    assert "layers and kernels need both evaluations traced" in page
    assert "no profiling overhead to show: trace level model" in page
    assert "no profiling overhead to show: trace level no_trace" in page
    assert "overheads-" not in page
    assert 'id="latency-0"' in page and 'id="latency-1"' in page
    assert "layer-latency-" not in page and "timeline-plot-" not in page


def test_tables_escape_text_and_keep_full_values() -> None:
    frame = pd.DataFrame(
        {
            "name": ["<b>relu & co</b>"],
            "latency (ms)": [0.123456789],
            "launches": [12345],
            "params": [Decimal(38282)],  # DuckDB's exact sums
        }
    )
    text = table(frame, "a <caption>")
    assert "<b>" not in text and "&lt;b&gt;relu &amp; co&lt;/b&gt;" in text
    assert "<caption>a &lt;caption&gt;</caption>" in text
    assert '<td class="num" title="0.123456789">0.1235</td>' in text
    assert '<td class="num">12,345</td>' in text and '<td class="num">38,282</td>' in text
    assert "<th class=num>launches (count)</th>" in text


# --- lower bounds (mlms bound) -----------------------------------------------------------


def _layer(name: str, kind: str, measured: float | None, bound: float) -> LayerBound:
    return LayerBound(
        name=name,
        node=name,
        kind=kind,
        op=kind,
        input_shapes=[[1, 8, 8]],
        output_shape=[1, 8, 8],
        config=f"{kind}:{name}",
        framework_ms=bound * 1.5,
        bound_ms=bound,
        bound_variant=f"{kind}_fast (fp32)",
        any_precision_ms=bound,
        any_precision_variant=f"{kind}_fast (fp32)",
        measured_ms=measured,
        on_critical_path=kind == "conv",
    )


def _bound(record: EvaluationRecord, evaluation_id: str, layers: int = 3) -> BoundRecord:
    """A bound made by hand at batch sizes 1 and 4, measured against ``evaluation_id``: a few
    layers (the last one unmeasured) and two what-ifs per batch size."""
    batches = []
    for batch_size in (1, 4):
        rows = [
            _layer(f"<conv{i}>", "conv", 0.03 * batch_size * (i + 1), 0.01 * batch_size * (i + 1))
            for i in range(layers)
        ]
        rows.append(_layer("fc", "gemm", None, 0.005 * batch_size))
        measured = 1.2 * sum(r.measured_ms or 0 for r in rows)
        sequential = sum(r.bound_ms for r in rows)
        batches.append(
            BatchBound(
                batch_size=batch_size,
                evaluation_id=evaluation_id,
                measured_ms=measured,
                kernel_ms=None,
                sequential_ms=sequential,
                parallel_ms=sequential * 0.8,
                what_ifs=[
                    WhatIf(name="fusion", now_ms=measured, if_ms=measured * 0.9, detail="fused"),
                    WhatIf(
                        name="best algorithm",
                        now_ms=measured,
                        if_ms=measured * 0.7,
                        detail="a faster convolution <algo>",
                    ),
                ],
                layers=rows,
            )
        )
    return BoundRecord(
        id=uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        request=BoundRequest(model=record.model.name, batch_sizes=[1, 4]),
        model=record.model.name,
        framework=record.framework.name,
        framework_version=record.framework.version,
        hardware=record.hardware,
        device="cpu",
        device_name="cpu",
        libraries={"torch": record.framework.version},
        precisions=["fp32"],
        framework_precisions={"conv": "fp32", "gemm": "fp32"},
        benchmarked=layers + 1,
        cached=0,
        bench_seconds=1.5,
        batches=batches,
    )


@pytest.fixture(scope="module")
def bound_report(store, cpu_records, tmp_path_factory) -> tuple[Path, str, BoundRecord]:
    """torch's evaluation with a bound measured against it (20 conv layers, so the slowest 15
    are a cut) and one measured against another evaluation."""
    record = cpu_records[0]
    bound = _bound(record, record.id, layers=20)
    elsewhere = _bound(record, uuid.uuid4().hex)
    assert bounds_for([record], [elsewhere, bound]) == [bound]
    text = build_report([record], _spans(store, [record]), bounds=[elsewhere, bound])
    path = tmp_path_factory.mktemp("report") / "bounds.html"
    path.write_text(text, encoding="utf-8")
    return path, text, bound


def test_bounds_for_picks_the_bounds_of_the_reports_evaluations(cpu_records):
    torch, onnx = cpu_records
    first, second, other = _bound(torch, torch.id), _bound(onnx, onnx.id), _bound(onnx, "0" * 32)
    assert bounds_for(cpu_records, [first, other, second]) == [first, second]
    assert bounds_for([torch], [other, second]) == []
    assert bounds_for(cpu_records, []) == []


def test_report_shows_the_bounds_measured_against_its_evaluations(
    bound_report, full_report, cpu_records
):
    _path, text, bound = bound_report
    page = _without_plotlyjs(text)
    assert page.count('id="bounds"') == 1 and page.count('href="#bounds"') == 1
    assert page.count("Lower bounds (Benanza)") == 2  # its heading and its TOC entry
    assert 'href="#bounds-0"' in page and "bounds-1" not in page  # the other bound left out
    # The section sits after the levels and before the comparison.
    assert page.index('id="timeline"') < page.index('id="bounds"') < page.index('id="across"')
    section = page[page.index('<section id="bounds"') : page.index('<section id="across"')]
    assert f"bound {bound.id[:8]}" in section
    assert label(cpu_records[0]) in section  # what it was measured against
    assert "not in this report" not in section
    for table_id in ("bound-summary-0", "bound-what-ifs-0", "bound-layers-table-0"):
        assert f'<table class="data" id="{table_id}">' in section
    for kind in ("latency", "layers"):
        for batch_size in (1, 4):
            assert f'id="bound-{kind}-0-bs{batch_size}"' in section
    assert "if best algorithm (ms)" in section and "LBL/measured" in section
    assert "&lt;conv0&gt;" in section and "<conv0>" not in section  # layer names escaped
    assert "a faster convolution &lt;algo&gt;" in section

    # Without bounds there is no such section, nor its entry in the table of contents.
    unbounded = _without_plotlyjs(full_report[1])
    assert 'id="bounds' not in unbounded and 'href="#bounds' not in unbounded
    assert "Lower bounds (Benanza)" not in unbounded


def test_bound_plots_render_in_chromium(browser, bound_report):
    path, _text, bound = bound_report
    opened = _open(browser, path)
    plots = _assert_clean(opened)
    expected = {f"bound-{kind}-0-bs{b}" for kind in ("latency", "layers") for b in (1, 4)}
    assert expected <= set(plots)
    summary = bound_summary(bound).set_index("batch size")
    for batch in bound.batches:
        bars = opened.trace(f"bound-latency-0-bs{batch.batch_size}", 0)
        row = summary.loc[batch.batch_size]
        names = ["measured", "sequential LBL", "parallel LBL", "if fusion", "if best algorithm"]
        assert bars["x"] == names
        assert bars["y"] == pytest.approx([row[f"{name} (ms)"] for name in names])
        measured = opened.trace(f"bound-layers-0-bs{batch.batch_size}", 0)
        bounds = opened.trace(f"bound-layers-0-bs{batch.batch_size}", 1)
        slowest = sorted(
            (layer for layer in batch.layers if layer.measured_ms is not None),
            key=lambda layer: -layer.measured_ms,
        )[:15]
        assert len(measured["y"]) == 15  # the top 15 of 21 layers
        assert measured["y"][0] == f"1. {slowest[0].name}"
        assert measured["x"] == pytest.approx([layer.measured_ms for layer in slowest])
        assert bounds["x"] == pytest.approx([layer.bound_ms for layer in slowest])
    opened.page.close()


# --- in a real browser --------------------------------------------------------------------


@dataclass
class Opened:
    page: object
    errors: list[str]
    foreign: list[str]

    def plots(self) -> dict[str, dict]:
        return {p["id"]: p for p in self.page.evaluate(ALL_PLOTS)}

    def trace(self, div_id: str, index: int) -> dict:
        return self.page.evaluate(
            """([id, i]) => { const t = document.getElementById(id).data[i];
                return {name: t.name, x: Array.from(t.x), y: Array.from(t.y)}; }""",
            [div_id, index],
        )

    def column(self, table_id: str, header: str) -> list[float]:
        """The full values (the cells' titles) of a table column, by its header."""
        return self.page.evaluate(
            """([id, header]) => { const t = document.getElementById(id);
                const i = [...t.querySelectorAll('thead th')]
                    .findIndex(h => h.textContent === header);
                return [...t.querySelectorAll('tbody tr')].map(r => Number(r.cells[i].title)); }""",
            [table_id, header],
        )


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(
            f"no chromium at {CHROMIUM}: the report is not opened in a browser "
            "(scripts/setup.sh installs Debian's chromium when run as root)"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def _open(browser, path: Path) -> Opened:
    """The report in a fresh page; any request for something other than the file itself is
    recorded and refused, as are console errors and uncaught exceptions."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    opened = Opened(page, [], [])
    page.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: opened.errors.append(str(exc)))
    page.on("requestfailed", lambda r: opened.foreign.append(r.url))
    url = path.as_uri()

    page.route(
        "**/*", lambda route: route.continue_() if route.request.url == url else route.abort()
    )
    page.on("request", lambda r: None if r.url == url else opened.foreign.append(r.url))
    page.goto(url, wait_until="load")
    # Plotly draws on load; should a plot not draw, the assertions name it, not this wait.
    with contextlib.suppress(PlaywrightError):
        page.wait_for_function(
            f"() => ({ALL_PLOTS})().every(p => p.drawn && p.traces > 0)", timeout=30_000
        )
    return opened


def _assert_clean(opened: Opened) -> dict[str, dict]:
    assert opened.errors == []
    assert opened.foreign == []
    plots = opened.plots()
    undrawn = [p for p in plots.values() if not (p["drawn"] and p["traces"] > 0)]
    assert plots and undrawn == []
    return plots


def _colours(png: bytes) -> int:
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    return len(image.getcolors(maxcolors=1 << 20) or [])


def test_full_report_renders_in_chromium(browser, full_report, store, gpu_record, cpu_records):
    path, _text = full_report
    opened = _open(browser, path)
    plots = _assert_clean(opened)
    expected = {
        *(f"{kind}-{i}" for kind in ("latency", "layer-latency", "layer-box") for i in range(3)),
        *(f"{kind}-{i}" for kind in ("layer-types", "timeline-plot") for i in range(3)),
        "overheads-0",
        "overheads-1",  # the capture (2) has no model-level run
        "kernels-top-2",
        "gpu-split-2-bs4",
        "roofline-model-2",
        "roofline-layer-2",
        "roofline-kernel-2",
        "across-latency",
        "layer-diff-1-bs1",
        "layer-diff-1-bs4",
        "layer-diff-2-bs4",
        "kernel-diff-2-bs4",
    }
    assert set(plots) == expected

    # What is plotted is what the table says and what the record holds.
    for index, record in enumerate([*cpu_records, gpu_record]):
        p50 = [r.latency_ms.p50 for r in record.results]
        plotted = opened.trace(f"latency-{index}", 0)
        assert plotted["name"] == "p50"
        assert plotted["x"] == [r.batch_size for r in record.results]
        assert plotted["y"] == p50
        assert opened.column(f"latency-table-{index}", "p50 (ms)") == p50

    # The model roofline's point is the analysis's, under this GPU's measured ceilings.
    spans = _spans(store, [gpu_record])
    model = roofline(spans, "model")
    points = opened.trace("roofline-model-2", 0)
    assert points["x"] == pytest.approx(model["flop/byte"].tolist())
    assert points["y"] == pytest.approx(model["GFLOP/s"].tolist())
    peaks = peaks_of(spans, gpu_record.trace_id)
    names = opened.page.evaluate(
        "() => document.getElementById('roofline-model-2').data.map(t => t.name)"
    )
    tensor = opened.trace(
        "roofline-model-2", next(i for i, n in enumerate(names) if "tensor c" in n)
    )
    assert max(tensor["y"]) == pytest.approx(peaks.flops_tensor / 1e9)

    shot = opened.page.screenshot(full_page=True)
    assert _colours(shot) > 50
    opened.page.close()


def test_single_evaluation_renders_in_chromium(browser, store, cpu_records, tmp_path):
    record = cpu_records[0]
    path = tmp_path / "one.html"
    path.write_text(build_report([record], _spans(store, [record])), encoding="utf-8")
    opened = _open(browser, path)
    plots = _assert_clean(opened)
    assert {"latency-0", "overheads-0", "layer-latency-0", "timeline-plot-0"} <= set(plots)
    assert "one evaluation in this report" in opened.page.inner_text("#across")
    # The top of the page, as a reader first sees it: the header and the latency plot.
    opened.page.set_viewport_size(TOP_OF_PAGE)
    shot = opened.page.screenshot()
    assert _colours(shot) > 50
    if target := os.environ.get("MLMS_REPORT_SCREENSHOT"):
        Path(target).write_bytes(shot)
    opened.page.close()


# --- the command ----------------------------------------------------------------------------


def _mlms(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlms: error: "), result.stderr
    return lines[0]


def test_command_writes_a_self_contained_file(cpu_records, gpu_record, tmp_path):
    output = tmp_path / "report.html"
    result = _mlms("report", cpu_records[0].id[:10], gpu_record.id, "-o", str(output))
    assert result.returncode == 0, result.stderr[-3000:]
    text = output.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert re.findall(r"<(?:script|link)[^>]*(?:src|href)\s*=", text) == []
    assert _external_sources(_without_plotlyjs(text)) == []
    assert 'id="roofline-kernel-1"' in text


def test_command_errors_are_one_line(cpu_records, tmp_path):
    missing = tmp_path / "no such folder" / "report.html"
    result = _mlms("report", cpu_records[0].id, "-o", str(missing))
    assert result.returncode == 1
    line = _one_error_line(result)
    assert f"cannot write {missing}: No such file or directory" in line
    assert not missing.parent.exists()

    unknown = _mlms("report", "0123456789abcdef", "-o", str(tmp_path / "r.html"))
    assert unknown.returncode == 1
    assert "'0123456789abcdef'" in _one_error_line(unknown)

    usage = _mlms("report", "-o", str(tmp_path / "r.html"))
    assert usage.returncode == 2
    assert "Missing argument 'ID [ID ...]'" in _one_error_line(usage)


def test_the_side_by_side_figures_built_unvalidated_equal_their_validated_copies() -> None:
    """The side-by-side figures skip plotly's validation for speed: each must be what plotly
    makes of the same figure when it validates it (an invalid property raises there)."""
    import json

    import plotly.graph_objects as go

    from mlms.report import figures

    sizes = [1, 16, 64]
    latency = pd.DataFrame({"batch size": sizes, "p50 (ms)": [1.0, 2.0, 3.0],
                            "p90 (ms)": [1.1, 2.2, 3.3], "p99 (ms)": [1.2, 2.3, 3.4],
                            "throughput (inputs/s)": [1e3, 8e3, 2.1e4]})  # fmt: skip
    energy = pd.DataFrame({"batch size": sizes, "J/inference": [1.0, 0.3, 0.2],
                           "inferences/J": [1.0, 3.3, 5.0], "average (W)": [100.0, 200, 300],
                           "peak (W)": [120.0, 250, 330], "idle (W)": [70.0, 70, 70]})  # fmt: skip
    compared = pd.DataFrame({"evaluation": ["a" * 32] * 3, "framework": ["torch"] * 3,
                             "version": ["2.11"] * 3, "batch size": sizes,
                             "p50 (ms)": [1.0, 2.0, 3.0],
                             "throughput (inputs/s)": [1e3, 8e3, 2.1e4]})  # fmt: skip
    for fig in (figures.latency_and_throughput(latency), figures.energy_by_batch(energy),
                figures.side_by_side(compared)):  # fmt: skip
        validated = go.Figure(fig.to_plotly_json())
        assert json.loads(fig.to_json()) == json.loads(validated.to_json())
        assert fig.layout.template.layout.paper_bgcolor == "white"  # plotly_white, resolved


def test_a_framework_level_trace_with_kernels_shows_them(store, gpu_record) -> None:
    """jax's framework level on a GPU holds XLA's kernels (its CUPTI): a record traced to that
    level, no deeper, still gets its kernel section (the capture's spans, the record's level
    set to framework)."""
    record = gpu_record.model_copy(update={"trace_level": TraceLevel.FRAMEWORK.label})
    blocks = kernel_part(record, Spans.from_store(store, [record.trace_id]), 0)
    assert any('id="kernels-top-0"' in block for block in blocks)
