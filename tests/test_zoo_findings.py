"""``benchmarks/zoo_findings.py`` over a results folder laid out as the GPU run kit brings one
back (``cells/<cell>/log.txt``, ``store/``), made here by the commands the zoo_sweep plan's
cells run, in-process and small (digits_cnn on this CPU): a sweep in strict fp32, bf16 and
fp16 (which torch refuses on the CPU: failed cells with their reason), a framework-level eval,
the outliers' fp32 and fp32 with cuDNN's autotuning, a model that does not exist, and for the
hardware level's kernels an H100's Kineto trace of resnet18 imported (no GPU here); and the
rules of its tables (saturation, launch-bound, bf16) on numbers chosen to sit each side."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import zoo_evals, zoo_findings  # noqa: E402
from mlms.cli.main import main  # noqa: E402

GPU_TRACE = REPO / "tests" / "data" / "kineto_resnet18_h100.json.gz"
SMALL = ["-f", "torch", "-n", "2", "--warmup", "1", "--min-seconds", "0"]
#: The eval cells: name, models, options, how many models fail.
EVALS = (
    ("framework_b16", ["digits_cnn", "no_such_model"], ["-b", "2", "-t", "framework"], 1),
    ("outliers_fp32", ["digits_cnn"], ["-b", "1,2", "--precision", "fp32"], 0),
    ("outliers_fp32_cudnn", ["digits_cnn"], ["-b", "1,2", "--cudnn-benchmark"], 0),
)


@contextlib.contextmanager
def _log() -> Iterator[io.StringIO]:
    """What a cell prints, as the kit's log.txt holds it (stdout and stderr together)."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
        yield text


def _cell(results: Path, name: str, log: str) -> None:
    folder = results / "cells" / name
    folder.mkdir(parents=True)
    (folder / "log.txt").write_text(log)
    (folder / "cell.json").write_text(json.dumps({"cell": name, "status": "done", "wall_s": 1}))


@pytest.fixture(scope="module")
def results(tmp_path_factory, mlms_home: Path) -> Path:
    """The kit's results folder is the MLMS_HOME the cells ran with: its store/ is theirs (the
    built models linked from the session's store, as the kit's packing leaves them out)."""
    folder = tmp_path_factory.mktemp("zoo_sweep_gpu")
    (mlms_home / "store" / "models").mkdir(parents=True, exist_ok=True)
    (folder / "store").mkdir()
    (folder / "store" / "models").symlink_to(mlms_home / "store" / "models")
    sweep = ["sweep", "-m", "digits_cnn", *SMALL, "-b", "1,2", "--precisions", "fp32,bf16,fp16"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLMS_HOME", str(folder))
        patch.setattr(sys, "argv", ["mlms", *sweep])
        with _log() as log, pytest.raises(SystemExit):  # the fp16 cells fail: exit status 1
            main()
        _cell(folder, "sweep_00", log.getvalue())
        for name, models, options, failing in EVALS:
            with _log() as log:
                failed = zoo_evals.run(models, [*SMALL, *options])
            assert failed == failing, log.getvalue()
            _cell(folder, name, log.getvalue())
        # The hardware level's kernels: an H100's trace of resnet18, imported (no GPU here).
        patch.setattr(sys, "argv", ["mlms", "import", "kineto", str(GPU_TRACE), "--model",
                                    "resnet18"])  # fmt: skip
        with _log() as log:
            main()
        _cell(folder, "hardware_by_task", log.getvalue())
    return folder


def test_findings_of_a_small_sweeps_folder(results: Path) -> None:
    text = zoo_findings.findings(results)
    assert "## image_classification" in text
    assert "| digits_cnn" in text and "fp32 b1 (ms)" in text and "bf16 b2 (ms)" in text
    assert "4 sweep cells completed of 6 (1 models, 2 evaluations)" in text
    # The framework-level record's layer types, from mlms's layer_types over its archive.
    layer_rows = [
        line for line in text.splitlines() if line.startswith("| digits_cnn") and "%" in line
    ]
    assert any("conv" in line for line in layer_rows)
    # Outliers: one column per run, and strict fp32's ratio to the autotuned run.
    assert "fp32 + cudnn benchmark p50 (ms)" in text and "fp32/fp32 + cudnn benchmark" in text
    # The imported H100 trace's kernels, by mlms's kernel_breakdown: cuDNN's convolution first.
    kernel_rows = _rows(text.split("### Kernels' shares", 1)[1])
    assert kernel_rows[0][:2] == ["resnet18", "1"] and "fprop_implicit_gemm" in kernel_rows[0][2]
    # Its layer types by the GPU time of the kernels joined to them: the convolutions first.
    gpu_rows = _rows(text.split("### Layer types' shares of GPU time", 1)[1])
    assert gpu_rows[0][:2] == ["resnet18", "1"] and gpu_rows[0][2].startswith("conv ")
    failures = _rows(text.split("## Failures", 1)[1])
    assert [
        "digits_cnn",
        "sweep torch fp16 b1,2",
        "--precision fp16: torch on cpu supports fp32, bf16",
    ] in (failures)
    assert [row[:2] for row in failures] == [
        ["digits_cnn", "sweep torch fp16 b1,2"], ["no_such_model", "framework_b16"]
    ]  # fmt: skip
    assert failures[1][2].startswith("unknown model 'no_such_model'")


def _rows(markdown: str) -> list[list[str]]:
    """The body rows of the first markdown table in ``markdown``, each cell stripped."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_tables_rules_on_numbers_each_side() -> None:
    rows = []
    # fast: flat 1 -> 16 (launch-bound), saturates at 16; slow: proportional, still rising.
    for model, p50 in (("fast", {1: 2.0, 16: 3.0, 64: 11.0}), ("slow", {1: 2.0, 16: 30, 64: 60})):
        for precision, scale in (("fp32", 1.0), ("bf16", 0.5 if model == "slow" else 0.97)):
            for batch, ms in p50.items():
                ms *= scale
                rows.append({"model": model, "framework": "torch", "precision": precision,
                             "batch_size": batch, "hw": "h200", "state": "completed",
                             "p50_ms": ms, "throughput": 1000 * batch / ms})  # fmt: skip
    # The records' throughput is over the mean; a cell of few iterations with one stalled
    # makes it flat: saturation reads the p50s.
    cells = pd.DataFrame(rows).assign(throughput=1.0)
    saturation = zoo_findings.saturation_table(cells).set_index(["model", "precision"])
    assert saturation.loc[("fast", "fp32"), "saturates at"] == "16"
    assert saturation.loc[("slow", "fp32"), "saturates at"] == "no (rising at 64)"
    launch = zoo_findings.launch_table(cells, pd.DataFrame()).set_index("model")
    assert bool(launch.loc["fast", "launch-bound"]) and not bool(launch.loc["slow", "launch-bound"])
    bf16 = zoo_findings.bf16_table(cells).set_index("model")
    assert bf16.loc["slow", "bf16 pays"] == "yes" and bf16.loc["fast", "bf16 pays"] == "no"
    assert bf16.loc["slow", "bf16/fp32 b64"] == pytest.approx(0.5)


def test_the_cells_table_names_each_cells_gpu_where_cells_ran_side_by_side(tmp_path: Path) -> None:
    """The kit's ``--one-gpu-each`` names in each cell.json the GPU its cell saw; the table shows
    it then, and leaves the column out where every cell saw every GPU."""
    (tmp_path / "store").mkdir()
    for name, gpu in (("sweep_00", "GPU-aaaa"), ("sweep_01", "GPU-bbbb")):
        folder = tmp_path / "cells" / name
        folder.mkdir(parents=True)
        (folder / "log.txt").write_text("")
        outcome = {"cell": name, "status": "done", "wall_s": 2.0, "pinned_to": gpu}
        (folder / "cell.json").write_text(json.dumps(outcome))
    table = zoo_findings.cell_table(zoo_findings.Results.read(tmp_path))
    assert table.set_index("cell")["GPU"].to_dict() == {
        "sweep_00": "GPU-aaaa",
        "sweep_01": "GPU-bbbb",
    }
    for marker in tmp_path.glob("cells/*/cell.json"):
        marker.write_text(
            marker.read_text().replace('"GPU-aaaa"', "null").replace('"GPU-bbbb"', "null")
        )
    assert "GPU" not in zoo_findings.cell_table(zoo_findings.Results.read(tmp_path))


def test_a_cut_eval_cell_names_the_model_it_cut_and_nothing_after() -> None:
    """The kit cuts a cell with SIGINT: mlms prints "mlms: aborted" for the model it was on; a
    process that went on would fail the next models on a half-imported library."""
    log = "\n".join(["== a", "evaluation 0123", "== b", "", "mlms: aborted", "== c",
                     "mlms: error: c on torch: transformers has no utils.logging"])  # fmt: skip
    assert list(zoo_findings._eval_errors(log)) == [
        ("b", "interrupted: the cell was cut while it ran")
    ]


def test_zoo_evals_stops_at_an_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    """mlms's main stands in for an evaluation the kit interrupts (exit status 130): a real
    SIGINT could not be timed to land inside one model's evaluation here. A model's own error
    (status 1) leaves the others running; the interrupt ends the run."""
    import mlms.cli.main

    ran: list[str] = []

    def main() -> None:
        model = sys.argv[sys.argv.index("--model") + 1]
        ran.append(model)
        raise SystemExit({"bad": 1, "cut": zoo_evals.INTERRUPTED}.get(model, 0))

    monkeypatch.setattr(mlms.cli.main, "main", main)
    with pytest.raises(SystemExit) as stopped:
        zoo_evals.run(["fine", "bad", "cut", "never"], ["-f", "torch"])
    assert stopped.value.code == zoo_evals.INTERRUPTED
    assert ran == ["fine", "bad", "cut"]


def test_a_cut_sweep_cell_whose_models_a_later_cell_swept_is_no_failure() -> None:
    """The jax chunks cut in one call and their models swept by later cells: the cut chunk is
    no failure once each of its models has every cell of its framework completed."""
    cells = pd.DataFrame(
        [("a", "jax", "completed"), ("a", "jax", "completed"), ("b", "jax", "completed"),
         ("b", "torch", "failed")],
        columns=["model", "framework", "state"],
    )  # fmt: skip
    argv = ["python3", "-m", "mlms", "sweep", "-m", "a,b", "-f", "jax", "--hw", "h200"]
    cut = {"status": "cut", "argv": argv}
    assert zoo_findings._swept_later(cut, cells)
    assert not zoo_findings._swept_later(cut | {"status": "failed"}, cells)
    assert not zoo_findings._swept_later({"status": "cut", "argv": [*argv[:5], "a,b,c"]}, cells)
    cells.loc[1, "state"] = "failed"
    assert not zoo_findings._swept_later(cut, cells)
