"""The ``mlms`` command as a user runs it: a real process, real output, exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlms.assets.keys import asset_prefix
from mlms.catalog.zoo import get_model


def mlms(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def _one_line_error(
    result: subprocess.CompletedProcess[str], *fragments: str, status: int = 1
) -> None:
    assert result.returncode == status, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlms: error:"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def evaluated() -> dict:
    result = mlms(
        "eval",
        "--model",
        "digits_cnn",
        "--framework",
        "onnxruntime",
        "-b",
        "1,2",
        "-n",
        "3",
        "--min-seconds",
        "0",
        "-t",
        "framework",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # --json: stdout holds the record and nothing else


def test_eval_json_prints_the_record(evaluated: dict) -> None:
    assert {
        "id",
        "created_at",
        "model",
        "framework",
        "hardware",
        "software",
        "trace_level",
        "trace_id",
        "results",
        "accuracy",
    } <= set(evaluated)
    assert [r["batch_size"] for r in evaluated["results"]] == [1, 2]
    assert set(evaluated["results"][0]["latency_ms"]) >= {
        "p50",
        "p90",
        "p95",
        "p99",
        "mean",
        "min",
        "max",
        "trimmed_mean",
    }
    assert evaluated["accuracy"]["top1"] >= 0.9
    assert evaluated["accuracy"]["top5"] >= evaluated["accuracy"]["top1"]
    assert evaluated["accuracy"]["samples"] == 360  # the held-out split of digits
    assert evaluated["hardware"]["host"] and evaluated["hardware"]["cpu_cores_logical"] >= 1
    assert evaluated["model"] == {
        "name": "digits_cnn",
        "version": "1.0.0",
        "origin": "zoo",
        "source": "",
    }
    assert evaluated["framework"]["name"] == "onnxruntime"
    for result in evaluated["results"]:
        assert set(result["levels"]) == {"model", "framework"}
        model, framework = result["levels"]["model"], result["levels"]["framework"]
        assert model["overhead"] == 1.0 and model["latency_ms"]["p50"] > 0
        assert framework["overhead"] == pytest.approx(
            framework["latency_ms"]["p50"] / model["latency_ms"]["p50"]
        )


def test_dropped_profiler_records_are_reported(
    evaluated: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlms.cli.render import record_summary
    from mlms.evaluation.record import EvaluationRecord

    record = EvaluationRecord.model_validate(evaluated)
    record_summary(record)
    assert "dropped" not in capsys.readouterr().err
    record.results[1].levels["framework"].dropped = 7
    record_summary(record)
    assert "batch size 2, framework run: the profiler dropped 7 records" in " ".join(
        capsys.readouterr().err.split()
    )


def test_table_output_and_listings(evaluated: dict) -> None:
    shown = mlms("eval", "--model", "digits_cnn", "-b", "1", "-n", "3", "--min-seconds", "0")
    assert shown.returncode == 0, shown.stderr
    assert "p50 (ms)" in shown.stdout and "throughput (inputs/s)" in shown.stdout
    assert "top-1" in shown.stdout
    listing = mlms("evals")
    assert evaluated["id"][:12] in listing.stdout
    assert "resnet50" in mlms("models").stdout
    analysis = mlms("analyze", evaluated["id"][:12])
    assert analysis.returncode == 0, analysis.stderr
    assert "slowest 10 layers" in analysis.stdout and "latency by layer type" in analysis.stdout
    assert "conv" in analysis.stdout


def test_trace_export(evaluated: dict, tmp_path: Path) -> None:
    chrome = tmp_path / "trace.json"
    result = mlms("trace", "export", evaluated["id"], "--format", "chrome", "-o", str(chrome))
    assert result.returncode == 0, result.stderr
    events = [e for e in json.loads(chrome.read_text())["traceEvents"] if e["ph"] == "X"]
    assert {"model", "predict", "preprocess"} <= {e["name"] for e in events}
    parquet = tmp_path / "spans.parquet"
    assert (
        mlms(
            "trace", "export", evaluated["id"], "--format", "parquet", "-o", str(parquet)
        ).returncode
        == 0
    )
    import pyarrow.parquet as pq

    assert pq.ParquetFile(parquet).read().num_rows == len(events)


def test_errors_are_one_line(tmp_path: Path, evaluated: dict) -> None:
    _one_line_error(mlms("eval", "--model", "resnet5"), "unknown model 'resnet5'", "resnet50")
    _one_line_error(
        mlms("eval", "--model", "alexnet", "--framework", "tensorflow"), "framework 'tensorflow'"
    )
    _one_line_error(mlms("eval", "--model", "digits_cnn", "-b", "1,x"), "bad batch size 'x'")
    _one_line_error(mlms("eval", "--model", "digits_cnn", "--hw", "v100"), "no 'v100' device")
    _one_line_error(mlms("analyze", "feedfacefeed"), "no evaluation with id 'feedfacefeed'")
    _one_line_error(
        mlms("agent", "--framework", "onnxruntime", "--address-file", str(tmp_path / "none" / "a")),
        f"--address-file '{tmp_path / 'none' / 'a'}': expected a file in a writable folder",
    )
    _one_line_error(
        mlms("server", "--address-file", str(tmp_path / "none" / "s")),
        f"--address-file '{tmp_path / 'none' / 's'}': expected a file in a writable folder",
    )

    bad_zoo = tmp_path / "zoo"
    bad_zoo.mkdir()
    (bad_zoo / "broken.yaml").write_text("name: broken\nversion: 1.0.0\ntask: detection\n")
    _one_line_error(
        mlms("models", env={"MLMS_ZOO_PATH": str(bad_zoo)}), str(bad_zoo / "broken.yaml"), "'task'"
    )


def test_unwritable_outputs_are_one_line_and_leave_nothing(evaluated: dict, tmp_path: Path) -> None:
    """Every command that writes a file goes through ``mlms.cli.files``: a path that cannot
    be written is one line naming it and the reason, checked before the work (compare runs no
    evaluation), and a failed write leaves no partial file (and /dev/full a device)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for fmt in ("chrome", "parquet"):
        for path, reason in (
            (tmp_path / "missing" / "out", "No such file or directory (no folder "),
            (a_file / "out", f"Not a directory ({a_file} is a file)"),
            (Path("/dev/full"), "No space left on device"),
        ):
            result = mlms("trace", "export", evaluated["id"], "--format", fmt, "-o", str(path))
            _one_line_error(result, f"cannot write {path}: {reason}")
        assert Path("/dev/full").is_char_device()  # pyarrow removes a path it failed to write
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]

    records = sorted((Path(os.environ["MLMS_HOME"]) / "store" / "evaluations").iterdir())
    plot = tmp_path / "missing" / "chart.png"
    result = mlms("compare", "-m", "digits_cnn", "-f", "torch", "--plot", str(plot))
    _one_line_error(result, f"cannot write {plot}: No such file or directory")
    assert sorted((Path(os.environ["MLMS_HOME"]) / "store" / "evaluations").iterdir()) == records


def test_outputs_are_written_whole(tmp_path: Path) -> None:
    from mlms.cli.files import write_file
    from mlms.errors import InvalidArgument

    target = tmp_path / "report.html"
    target.write_text("the previous report")

    def fails_halfway(path: Path) -> None:
        path.write_text("half a report")
        raise OSError(28, "No space left on device")

    with pytest.raises(InvalidArgument, match=f"cannot write {target}: No space left on device"):
        write_file(target, fails_halfway)
    assert target.read_text() == "the previous report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    write_file(target, lambda path: path.write_text("the new report"))
    assert target.read_text() == "the new report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_malformed_command_lines_are_one_line() -> None:
    _one_line_error(
        mlms("eval", "--trace-level", "bogus"),
        "'bogus' is not one of 'no_trace'",
        "(see 'mlms eval -h')",
        status=2,
    )
    _one_line_error(mlms("eval", "-n", "x"), "'x' is not a valid integer", status=2)
    _one_line_error(mlms("evl"), "No such command 'evl'", "'eval'", status=2)
    _one_line_error(mlms("analyze"), "Missing argument 'EVALUATION_ID'", status=2)


def test_checksum_mismatch_is_refused(evaluated: dict, tmp_path: Path) -> None:
    """The built asset, copied into a home of this test's own and damaged there (the session's
    store is shared with other tests, which must not meet a damaged asset)."""
    prefix = asset_prefix(get_model("digits_cnn"), "onnxruntime")
    built = Path(os.environ["MLMS_HOME"]) / "store" / prefix
    copy = tmp_path / "store" / prefix
    shutil.copytree(built, copy)
    path = copy / "model.onnx"
    path.write_bytes(path.read_bytes() + b"tampered")
    _one_line_error(
        mlms(
            "eval",
            "--model",
            "digits_cnn",
            "--framework",
            "onnxruntime",
            env={"MLMS_HOME": str(tmp_path)},
        ),
        "checksum mismatch",
        "model.onnx",
    )


def test_assets_builds_into_a_store_and_verifies_what_is_there(tmp_path: Path) -> None:
    store = tmp_path / "fleet-store"
    built = mlms("assets", "-f", "mxnet", "-m", "digits_cnn", "--store", str(store))
    assert built.returncode == 0, built.stderr
    info = json.loads(
        (store / "models/digits_cnn/1.0.0/mxnet/asset.json").read_text()
    )  # exported from the torch weights, which are stored beside it
    assert (store / "models/digits_cnn/1.0.0/torch/asset.json").exists()
    assert info["sha256"][:16] in built.stdout
    again = mlms("assets", "-f", "mxnet", "-m", "digits_cnn", "--store", str(store))
    assert again.returncode == 0 and info["sha256"][:16] in again.stdout
    _one_line_error(
        mlms("assets", "-f", "mxnet", "-m", "resnet5", "--store", str(store)),
        "unknown model 'resnet5'",
    )
