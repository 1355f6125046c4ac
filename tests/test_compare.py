"""``mlms compare``: the side-by-side table (mlms.analysis.compare), its chart, the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mlms.analysis.compare import COLUMNS, compare_frameworks
from mlms.analysis.engine import Spans
from mlms.analysis.plots import framework_comparison_chart
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import evaluate
from tests.framework_checks import VOCABULARY

PNG = b"\x89PNG\r\n\x1a\n"


def _mlms(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )


def test_table_puts_frameworks_side_by_side(store, tmp_path: Path) -> None:
    records = [
        evaluate(
            EvaluationRequest(
                model="digits_cnn",
                framework=framework,
                batch_sizes=[1, 2],
                iterations=3,
                warmup=1,
                min_seconds=0,
                trace_level="framework",
            ),
            store=store,
        )
        for framework in ("torch", "onnxruntime")
    ]
    table = compare_frameworks(records, Spans.from_store(store, [r.trace_id for r in records]))
    assert list(table.columns) == COLUMNS
    assert list(zip(table["framework"], table["batch size"], strict=True)) == [
        ("torch", 1),
        ("torch", 2),
        ("onnxruntime", 1),
        ("onnxruntime", 2),
    ]
    for record in records:
        for result in record.results:
            row = table[
                (table["framework"] == record.framework.name)
                & (table["batch size"] == result.batch_size)
            ].iloc[0]
            assert row["p50 (ms)"] == result.latency_ms.p50
            assert row["p99 (ms)"] == result.latency_ms.p99
            assert row["throughput (inputs/s)"] == result.throughput
    assert (table["layers"] >= 5).all()  # digits_cnn has 9 torch layers; ORT fuses some
    for text in table["top layer types (share of layer time)"]:
        kinds = [part.split()[0] for part in text.split(", ")]
        assert kinds and set(kinds) <= VOCABULARY and text.endswith("%")
        assert "conv" in kinds, text

    chart = framework_comparison_chart(table, tmp_path / "chart.png", "digits_cnn")
    assert chart.read_bytes()[:8] == PNG


def test_compare_command_runs_four_frameworks(tmp_path: Path) -> None:
    chart = tmp_path / "compare.png"
    result = _mlms(
        "compare",
        "--model",
        "digits_cnn",
        "--frameworks",
        "torch,onnxruntime,tensorflow,mxnet",
        "--batch-size",
        "1,2",
        "--iterations",
        "2",
        "--warmup",
        "1",
        "--min-seconds",
        "0",
        "--plot",
        str(chart),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for framework in ("torch", "onnxruntime", "tensorflow", "mxnet"):
        assert framework in result.stdout
    assert f"chart: {chart}" in result.stdout
    assert chart.read_bytes()[:8] == PNG


def test_compare_json_prints_the_records() -> None:
    result = _mlms(
        "compare",
        "-m",
        "digits_cnn",
        "-f",
        "torch,onnxruntime",
        "-n",
        "2",
        "--warmup",
        "0",
        "--min-seconds",
        "0",
        "-t",
        "model",
        "--json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = json.loads(result.stdout)
    assert [r["framework"]["name"] for r in records] == ["torch", "onnxruntime"]
    assert all(r["model"]["name"] == "digits_cnn" for r in records)


def test_unknown_framework_is_one_line_error() -> None:
    result = _mlms("compare", "-m", "digits_cnn", "-f", "torch,caffe")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("mlms: error:")]
    assert len(lines) == 1 and "unknown framework 'caffe'" in lines[0], result.stderr
