"""The ``mlms`` command starts light: loading the CLI, or listing the zoo and the stored
evaluations, loads no framework and none of the heavy data libraries; those load in the command
that uses them. Each check runs in a fresh interpreter, as a user's shell starts one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from mlms.cli.main import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]

#: Top-level packages that cost a user's start-up tenths of a second each.
HEAVY = (
    "torch",
    "tensorflow",
    "keras",
    "onnxruntime",
    "onnx",
    "mxnet",
    "transformers",
    "scipy",
    "pandas",
    "pyarrow",
    "duckdb",
    "polars",
    "sqlalchemy",
    "grpc",
    "google",  # protobuf
)

#: Runs the CLI as ``mlms ARGS`` would (then imports the module named by the second argument,
#: if any), and prints the names of the modules loaded.
PROBE = """
import importlib, json, sys
from mlms.cli.main import cli
args = json.loads(sys.argv[1])
if args:
    cli.main(args, standalone_mode=False, prog_name="mlms")
if sys.argv[2]:
    importlib.import_module(sys.argv[2])
print("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""


def loaded_modules(args: list[str], home: Path, also: str = "") -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLMS_HOME": str(home)}
    env.pop("MLMS_SERVER", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), also],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


#: What a command needs for its own work: ``mlms evals`` queries the evaluation index (SQL).
NEEDS = {"evals": {"sqlalchemy"}}


@pytest.mark.parametrize("args", [[], ["--help"], ["models"], ["evals"]], ids=str)
def test_the_cli_loads_no_heavy_library(args: list[str], tmp_path: Path) -> None:
    modules = loaded_modules(args, tmp_path)
    assert "mlms.cli.main" in modules
    allowed = NEEDS.get(args[0], set()) if args else set()
    heavy = sorted(name for name in modules if name.split(".")[0] in set(HEAVY) - allowed)
    assert not heavy, f"mlms {' '.join(args)} loaded {heavy[:10]}"


def test_the_probe_sees_a_heavy_import(tmp_path: Path) -> None:
    """The check above can fail: the analysis engine, which commands load on use, brings pandas
    and duckdb, and the probe sees them."""
    modules = loaded_modules(["--help"], tmp_path, also="mlms.analysis.engine")
    assert {"pandas", "duckdb"} <= modules


def test_the_remote_client_loads_no_data_library(tmp_path: Path) -> None:
    """A command against a server (``MLMS_SERVER``) loads the gRPC client: gRPC and protobuf,
    but no framework and none of the data libraries, which load with the spans and analyses
    that use them."""
    modules = loaded_modules(["--help"], tmp_path, also="mlms.remote_client")
    assert "mlms.remote_client" in modules
    heavy = sorted(n for n in modules if n.split(".")[0] in set(HEAVY) - {"grpc", "google"})
    assert not heavy, f"the remote client loaded {heavy[:10]}"


def test_an_agent_starts_without_the_table_libraries(tmp_path: Path) -> None:
    """An agent registers before its first evaluation: loading it loads no pandas, DuckDB,
    Polars or SQL library (the span archive's writer needs Arrow alone; its readers load
    pandas on use)."""
    modules = loaded_modules(["--help"], tmp_path, also="mlms.agent.process")
    assert "mlms.tracer.archive" in modules
    heavy = sorted(
        n for n in modules if n.split(".")[0] in {"pandas", "duckdb", "polars", "sqlalchemy"}
    )
    assert not heavy, f"the agent loaded {heavy[:10]}"


def test_importing_a_trace_loads_no_scipy(tmp_path: Path) -> None:
    """``mlms import kineto`` computes the record's latency statistics over the trace's
    ProfilerSteps: a few, whose median interval needs no SciPy (a quarter of a second to
    load), and reads the trace with pyarrow and DuckDB."""
    trace = ROOT / "tests" / "data" / "kineto_resnet18_h100.json.gz"
    modules = loaded_modules(["import", "kineto", str(trace), "--batch-size", "1"], tmp_path)
    assert {"mlms.analysis.kineto_record", "mlms.evaluation.stats", "duckdb"} <= modules
    assert "scipy" not in modules


def test_a_command_loads_only_its_own_module(tmp_path: Path) -> None:
    """``mlms evals`` over an index made already (the first, in a new home, rebuilds it from
    the store) loads its command and the index: no other command's module (commands load on
    use), no record model, rebuild or sweep."""
    assert "mlms.database.keeper" in loaded_modules(["evals"], tmp_path)  # the first: rebuilt
    modules = loaded_modules(["evals"], tmp_path)
    assert "mlms.cli.listing" in modules and "mlms.database.index" in modules
    others = {"mlms.cli.evaluate", "mlms.cli.sweep", "mlms.cli.bound", "mlms.cli.models"}
    heavy = {"mlms.evaluation.record", "mlms.database.keeper", "mlms.evaluation.sweep"}
    assert not (others | heavy) & modules, sorted((others | heavy) & modules)


def test_the_help_lists_every_command_and_loads_none(tmp_path: Path) -> None:
    """``mlms --help`` lists the commands from the table in ``mlms.cli.main``, whose every
    entry names a command that loads; the listing itself loads no command's module."""
    modules = loaded_modules(["--help"], tmp_path)
    assert not {where.partition(":")[0] for where, _ in COMMANDS.values()} & modules
    for name in COMMANDS:
        assert isinstance(cli.get_command(click.Context(cli), name), click.Command), name
    shown = subprocess.run(
        [sys.executable, "-c", "from mlms.cli.main import main; main()", "--help"],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MLMS_HOME": str(tmp_path)},
    ).stdout  # fmt: skip
    assert [line.split()[0] for line in shown.split("Commands:")[1].splitlines() if line] == (
        sorted(COMMANDS)
    )
