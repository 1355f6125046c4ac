"""Importing Kineto (PyTorch profiler) traces: a real trace recorded here with torch.profiler,
checked against what the raw JSON says, a real GPU trace when tests/data holds one, and the
``mlms import kineto`` command as a user runs it."""

from __future__ import annotations

import gc
import gzip
import json
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from mlms.analysis import kineto_events
from mlms.analysis.kineto_import import kineto_table, read_kineto
from mlms.errors import InvalidArgument, NotFound
from mlms.tracer.archive import SCHEMA, upgrade
from mlms.tracer.levels import TraceLevel
from tests.processes import run_mlms

GPU_TRACE = Path(__file__).parent / "data" / "kineto_resnet18_h100.json.gz"
KEPT = {"user_annotation", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy"}
KEPT |= {"gpu_memset"}
BATCH = 2


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """resnet18 (random weights) for 3 steps under torch.profiler's schedule: the last two are
    recorded, each with a ``preprocess`` annotation around an op."""
    import torch
    import torchvision
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    path = tmp_path_factory.mktemp("kineto") / "resnet18_cpu.json"
    model = torchvision.models.resnet18(weights=None).eval()
    batch = torch.randn(BATCH, 3, 64, 64)
    with (
        torch.inference_mode(),
        profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=2),
            record_shapes=True,
            on_trace_ready=lambda done: done.export_chrome_trace(str(path)),
        ) as profiler,
    ):
        for _ in range(3):
            with record_function("preprocess"):
                inputs = batch * 1.0
            model(inputs)
            profiler.step()
    return path


def _events(path: Path) -> tuple[dict, list[dict]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        document = json.load(handle)
    events = [e for e in document["traceEvents"] if e.get("ph") == "X" and e.get("cat") in KEPT]
    return document, events


def _ns(document: dict, event: dict) -> tuple[int, int]:
    start = document.get("baseTimeNanoseconds", 0) + round(event["ts"] * 1000)
    return start, start + round(event.get("dur", 0) * 1000)


def _rows(table: pa.Table) -> dict[str, dict]:
    return {row["span_id"]: row for row in table.to_pylist()}


def _is_step(event: dict) -> bool:
    return event["cat"] == "user_annotation" and event["name"].startswith("ProfilerStep#")


def _innermost(event: dict, index: int, candidates: list[tuple[int, dict]], document: dict):
    """The innermost candidate around ``event`` on its thread (ties: the earlier event)."""
    start, end = _ns(document, event)
    around = []
    for other_index, other in candidates:
        other_start, other_end = _ns(document, other)
        if other_index == index or (other["pid"], other["tid"]) != (event["pid"], event["tid"]):
            continue
        same = (other_start, other_end) == (start, end)
        if other_start <= start and end <= other_end and (not same or other_index < index):
            around.append((other_start, -other_end, other_index))
    return max(around)[2] if around else None


def test_levels_counts_and_times_match_the_raw_trace(cpu_trace: Path) -> None:
    document, events = _events(cpu_trace)
    table = kineto_table(cpu_trace, batch_size=BATCH)
    assert table.schema.names == SCHEMA.names
    for field, expected in zip(table.schema, SCHEMA, strict=True):  # strings may be dictionaries
        actual = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        assert actual == expected.type, field
    assert upgrade(table).num_rows == table.num_rows
    rows = table.to_pylist()
    expected_levels = Counter(
        TraceLevel.MODEL
        if _is_step(e)
        else TraceLevel.APPLICATION
        if e["cat"] == "user_annotation"
        else TraceLevel.FRAMEWORK
        for e in events
    )
    assert Counter(TraceLevel(r["level"]) for r in rows) == expected_levels
    assert expected_levels[TraceLevel.MODEL] == 2 and expected_levels[TraceLevel.APPLICATION] == 2
    assert sorted((r["name"], r["start_ns"], r["end_ns"]) for r in rows) == sorted(
        (e["name"], *_ns(document, e)) for e in events
    )
    steps = sorted((r for r in rows if r["level"] == TraceLevel.MODEL), key=lambda r: r["start_ns"])
    raw_steps = sorted((e for e in events if _is_step(e)), key=lambda e: e["ts"])
    assert [s["end_ns"] - s["start_ns"] for s in steps] == [
        round(e["dur"] * 1000) for e in raw_steps
    ]
    assert all(s["kind"] == "model" and s["batch_size"] == BATCH for s in steps)
    ops = [r for r in rows if r["level"] == TraceLevel.FRAMEWORK]
    assert all(r["op_type"] == r["name"] and r["thread"] is not None for r in ops)
    assert {r["kind"] for r in ops} >= {"conv", "batchnorm", "relu", "gemm"}
    conv = next(r for r in ops if r["name"] == "aten::conv2d")
    assert conv["input_shapes"][:2] == [[BATCH, 3, 64, 64], [64, 3, 7, 7]]


def test_parents_are_the_innermost_op_or_step_around_each_op(cpu_trace: Path) -> None:
    document, events = _events(cpu_trace)
    table = kineto_table(cpu_trace, batch_size=BATCH)
    rows = _rows(table)
    by_key = {(r["name"], r["start_ns"], r["end_ns"]): r["span_id"] for r in rows.values()}
    assert len(by_key) == len(rows)  # every span told apart by name and interval
    span_of = [by_key[(e["name"], *_ns(document, e))] for e in events]
    containers = [(i, e) for i, e in enumerate(events) if e["cat"] == "cpu_op" or _is_step(e)]
    annotations = [(i, e) for i, e in enumerate(events) if e["cat"] == "user_annotation"]
    for index, event in enumerate(events):
        candidates = containers if event["cat"] == "cpu_op" else annotations
        parent = _innermost(event, index, candidates, document)
        row = rows[span_of[index]]
        assert row["parent_id"] == (None if parent is None else span_of[parent]), event
        if parent is not None:
            above = rows[row["parent_id"]]
            assert above["start_ns"] <= row["start_ns"] and row["end_ns"] <= above["end_ns"]
            assert above["thread"] == row["thread"]


def test_top_level_ops_are_numbered_layers_and_carry_the_batch_size(cpu_trace: Path) -> None:
    rows = _rows(kineto_table(cpu_trace, batch_size=BATCH))
    steps = {s for s, r in rows.items() if r["level"] == TraceLevel.MODEL}
    for step in steps:
        layers = sorted(
            (r for r in rows.values() if r["parent_id"] == step and r["level"] == 3),
            key=lambda r: r["start_ns"],
        )
        assert [r["layer_index"] for r in layers] == list(range(len(layers)))
        assert len(layers) > 20
    nested = [r for r in rows.values() if r["level"] == 3 and r["parent_id"] not in steps]
    assert nested and all(r["layer_index"] is None for r in nested)
    inside = [r for r in rows.values() if r["level"] != TraceLevel.APPLICATION]
    assert all(r["batch_size"] == BATCH and r["run"] == 1 for r in inside)


def test_the_same_file_gives_the_same_trace_and_gzip_reads_alike(
    cpu_trace: Path, tmp_path: Path
) -> None:
    data = cpu_trace.read_bytes()
    packed = tmp_path / "trace.json.gz"
    packed.write_bytes(gzip.compress(data))
    first, again, from_bytes = (
        read_kineto(cpu_trace),
        read_kineto(str(cpu_trace)),
        read_kineto(data),
    )
    assert first.trace_id == again.trace_id == from_bytes.trace_id
    assert len(first.trace_id) == 32 and int(first.trace_id, 16) >= 0
    assert first.table.equals(from_bytes.table)
    ids = first.table["span_id"].to_pylist()
    assert len(set(ids)) == len(ids) and all(len(i) == 16 for i in ids)
    unzipped = read_kineto(packed).table
    columns = [c for c in SCHEMA.names if c not in ("trace_id", "span_id", "parent_id")]
    assert unzipped.select(columns).equals(first.table.select(columns))
    assert first.metadata["schemaVersion"] == 1


def _without_trace_id(table: pa.Table) -> dict[str, list]:
    """The table's columns, span ids without the trace's prefix (their file order stays)."""
    columns = table.drop_columns(["trace_id"]).to_pydict()
    for column in ("span_id", "parent_id"):
        columns[column] = [None if i is None else i[8:] for i in columns[column]]
    return columns


def test_parts_parsed_side_by_side_keep_file_order(
    cpu_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = kineto_table(cpu_trace)
    monkeypatch.setattr(kineto_events, "WINDOW", 2048)
    monkeypatch.setattr(kineto_events, "PARTS", 5)
    assert kineto_table(cpu_trace).equals(whole)
    compact = tmp_path / "compact.json"  # no separator between events: one part
    compact.write_text(json.dumps(json.loads(cpu_trace.read_text())))
    assert _without_trace_id(kineto_table(compact)) == _without_trace_id(whole)


def test_a_bare_event_array_imports_too() -> None:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
         "ts": 10.0, "dur": 100.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 20.5,
         "dur": 10.25, "args": {"Input Dims": [[4, 8]]}},
        {"ph": "i", "name": "instant", "pid": 1, "tid": 1, "ts": 30.0},
    ]  # fmt: skip
    table = kineto_table(json.dumps(events).encode())
    rows = sorted(table.to_pylist(), key=lambda r: r["level"])
    assert [(r["name"], r["level"], r["kind"]) for r in rows] == [
        ("ProfilerStep#0", 2, "model"),
        ("aten::relu", 3, "relu"),
    ]
    assert rows[1]["parent_id"] == rows[0]["span_id"] and rows[1]["layer_index"] == 0
    assert (rows[1]["start_ns"], rows[1]["end_ns"]) == (20_500, 30_750)
    assert rows[1]["input_shapes"] == [[4, 8]]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"hello", "is not JSON"),
        (b'{"schemaVersion": 1}', "no traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1', "not a complete"),
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": "soon"}]}', "not a valid"),
        # mtime=0: the id holds the bytes, which every xdist worker must collect alike
        (gzip.compress(b'{"traceEvents": []}', mtime=0)[:-12], "not a readable gzip"),
    ],
)
def test_bad_input_is_one_invalid_argument(content: bytes, fragment: str) -> None:
    with pytest.raises(InvalidArgument, match=fragment):
        kineto_table(content)


def test_a_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"nothing\.json"):
        kineto_table(tmp_path / "nothing.json")


def test_real_gpu_trace_kernels_hang_off_their_launch_calls() -> None:
    if not GPU_TRACE.exists():
        pytest.skip(f"{GPU_TRACE} is not there (a real H100 trace of resnet18, added by hand)")
    _, events = _events(GPU_TRACE)
    table = kineto_table(GPU_TRACE)
    rows = _rows(table)
    kernels = [r for r in rows.values() if r["kind"] == "kernel"]
    raw = [e for e in events if e["cat"] == "kernel"]
    assert len(kernels) == len(raw) > 0
    for kernel in kernels:
        launch = rows[kernel["parent_id"]]
        assert launch["level"] == TraceLevel.SYSTEM_LIBRARY and launch["kind"] == "runtime"
        assert launch["correlation_id"] == kernel["correlation_id"] is not None
        assert kernel["device"].startswith("cuda:") and kernel["stream"] is not None
    assert sum(r["end_ns"] - r["start_ns"] for r in kernels) == sum(
        round(e["dur"] * 1000) for e in raw
    )
    launches = [r for r in rows.values() if r["level"] == TraceLevel.SYSTEM_LIBRARY]
    assert all(rows[r["parent_id"]]["level"] in (2, 3) for r in launches if r["parent_id"])


# --- the command ---------------------------------------------------------------------------


def _one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlms: error:"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_import_command_refuses_bad_input_in_one_line(tmp_path: Path, cpu_trace: Path) -> None:
    not_json = tmp_path / "notes.json"
    not_json.write_text("not a trace")
    no_events = tmp_path / "empty.json"
    no_events.write_text('{"schemaVersion": 1}')
    _one_line_error(
        run_mlms(tmp_path, "import", "kineto", str(tmp_path / "gone.json")), "gone.json"
    )
    _one_line_error(run_mlms(tmp_path, "import", "kineto", str(not_json)), "notes.json", "not JSON")
    _one_line_error(run_mlms(tmp_path, "import", "kineto", str(no_events)), "no traceEvents")
    for bad in ("0", "eight"):
        result = run_mlms(tmp_path, "import", "kineto", str(cpu_trace), "--batch-size", bad)
        _one_line_error(result, f"--batch-size {bad!r}", "positive integer")


def test_the_import_command_pauses_the_collector_and_turns_it_back_on(
    tmp_path: Path, cpu_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run in-process (as a program or a test runs it), the command leaves the garbage
    collector as it found it, having run without it."""
    from click.testing import CliRunner

    from mlms.analysis import kineto_ranks
    from mlms.cli.main import cli

    seen: list[bool] = []
    read = kineto_ranks.read_kineto_path

    def reading(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        return read(*args, **kwargs)

    monkeypatch.setattr(kineto_ranks, "read_kineto_path", reading)
    monkeypatch.setenv("MLMS_HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["import", "kineto", str(cpu_trace), "--batch-size", "1"])
    assert result.exit_code == 0, result.output
    assert seen == [False] and gc.isenabled()


def test_imported_trace_is_an_evaluation_to_analyze_and_export(
    tmp_path: Path, cpu_trace: Path
) -> None:
    result = run_mlms(tmp_path, "import", "kineto", str(cpu_trace), "--model", "resnet18", "-h")
    assert result.returncode == 0 and "--batch-size" in result.stdout
    result = run_mlms(
        tmp_path, "import", "kineto", str(cpu_trace), "--model", "resnet18", "--batch-size", "2"
    )
    assert result.returncode == 0, result.stderr
    evaluation = result.stdout.split("evaluation ")[1].split()[0]
    assert "0 kernels, 2 ProfilerSteps" in result.stdout
    record = json.loads((tmp_path / "store" / "evaluations" / f"{evaluation}.json").read_text())
    assert record["framework"]["name"] == "torch" and record["device"] == "cpu"
    assert record["trace_level"] == "framework" and record["agent"]["mode"] == "import"
    assert record["results"][0]["batch_size"] == 2 and record["results"][0]["iterations"] == 2
    analyzed = run_mlms(tmp_path, "analyze", evaluation)
    assert analyzed.returncode == 0, analyzed.stderr
    assert "slowest" in analyzed.stdout and "aten::conv2d" in analyzed.stdout
    listed = run_mlms(tmp_path, "evals")
    assert evaluation[:12] in listed.stdout and "resnet18" in listed.stdout
    exported = tmp_path / "trace.json"
    result = run_mlms(tmp_path, "trace", "export", evaluation, "-o", str(exported))
    assert result.returncode == 0, result.stderr
    assert len(json.loads(exported.read_text())["traceEvents"]) >= record["span_count"]


def test_a_trace_without_profiler_steps_says_the_batch_size_it_assumed(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 20.5,
         "dur": 10.25, "args": {"Input Dims": [[4, 8]]}},
    ]  # fmt: skip
    trace = tmp_path / "plain.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    result = run_mlms(tmp_path, "import", "kineto", str(trace), "--model", "plain")
    assert result.returncode == 0, result.stderr
    assert "no ProfilerStep: the whole trace is one predict" in result.stdout
    assert "batch size 1 assumed for the trace's one predict" in result.stderr
    assert "--batch-size" in result.stderr
    given = run_mlms(
        tmp_path, "import", "kineto", str(trace), "--model", "plain", "--batch-size", "4"
    )
    assert given.returncode == 0 and "assumed" not in given.stderr, given.stderr
