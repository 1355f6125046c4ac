"""Several ranks in one trace: a folder of Kineto rank traces imported as one evaluation, and
the distributed analyses (docs/DESIGN.md, "Span record").

Real traces where this machine can make them: two gloo processes on the CPU under
torch.profiler (``tests/gloo_ranks.py``). What needs GPUs (NCCL kernels, ``record_param_comms``
message sizes) comes from ``benchmarks/synthetic_kineto.py``'s tensor-parallel rank traces,
laid out as Kineto writes them; the analyses' arithmetic is checked on spans built by hand,
whose breakdown, overlap, skew and bandwidth can be worked out on paper.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from mlms.analysis.distributed import collectives, comm_overlap, rank_breakdown, rank_skew
from mlms.analysis.engine import Spans
from mlms.analysis.kineto_ranks import kernel_sums, read_kineto_path
from mlms.errors import InvalidArgument, NotFound
from mlms.tracer.archive import SCHEMA, to_table
from mlms.tracer.communication import COMMUNICATION, is_communication
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import SpanRecord
from tests import gloo_ranks
from tests.processes import run_mlms

REPO = Path(__file__).resolve().parents[1]
KEPT = {"user_annotation", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy"}
KEPT |= {"gpu_memset"}


def _synthetic():
    spec = importlib.util.spec_from_file_location(
        "synthetic_kineto", REPO / "benchmarks" / "synthetic_kineto.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gloo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gloo")
    gloo_ranks.record(folder)
    return folder


@pytest.fixture(scope="module")
def nccl_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("nccl")
    _synthetic().write_ranks(folder, 2, 400, compress=True)
    return folder


def _document(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def _kept(document: dict) -> list[dict]:
    return [e for e in document["traceEvents"] if e.get("ph") == "X" and e.get("cat") in KEPT]


def test_a_folder_of_real_gloo_ranks_is_one_trace_with_a_rank_on_every_span(
    gloo_folder: Path,
) -> None:
    trace = read_kineto_path(gloo_folder)
    table = trace.table
    assert table.schema.names == SCHEMA.names
    assert table["rank"].null_count == 0
    assert trace.sources == {0: "rank0.json", 1: "rank1.json"}
    assert pc.count_distinct(table["span_id"]).as_py() == table.num_rows
    assert pc.count_distinct(table["trace_id"].cast(pa.string())).as_py() == 1
    for rank, name in trace.sources.items():
        events = _kept(_document(gloo_folder / name))
        mine = table.filter(pc.equal(table["rank"], rank))
        assert mine.num_rows == len(events)
        raw = Counter(e["name"] for e in events if is_communication(e["name"]))
        got = mine.filter(pc.equal(mine["kind"].cast(pa.string()), COMMUNICATION))
        assert Counter(got["name"].to_pylist()) == raw
        # the collectives torch 2.14 records on the host: c10d's ops and gloo's annotations
        assert "c10d::allreduce_" in raw and "gloo:all_reduce" in raw
        assert sum(n.startswith("ProfilerStep#") for n in mine["name"].to_pylist()) == 3
    assert read_kineto_path(gloo_folder).trace_id == trace.trace_id  # the same folder, same id


def test_each_ranks_kernel_and_nccl_sums_equal_the_raw_traces(nccl_folder: Path) -> None:
    trace = read_kineto_path(nccl_folder)
    sums = kernel_sums(trace.table)
    for rank, name in trace.sources.items():
        raw = {"kernel": (0, 0), COMMUNICATION: (0, 0)}
        for event in _kept(_document(nccl_folder / name)):
            if event["cat"] == "kernel":
                kind = COMMUNICATION if event["name"].startswith("nccl") else "kernel"
                calls, ns = raw[kind]
                raw[kind] = (calls + 1, ns + round(event["dur"] * 1000))
        assert raw[COMMUNICATION][0] > 0
        assert {kind: sums[(rank, kind)] for kind in raw} == raw


def test_message_sizes_come_from_the_kernel_or_the_op_that_launched_it(
    nccl_folder: Path, tmp_path: Path
) -> None:
    """Newer Kineto copies a collective's args onto its NCCL kernel; older Kineto has them on
    ``record_param_comms`` only: the import finds them in either place."""
    expected = _synthetic().ALL_REDUCE_ELEMENTS * 2  # bf16
    for name in ("rank-0.json.gz", "rank-1.json.gz"):
        document = _document(nccl_folder / name)
        for event in document["traceEvents"]:
            if event.get("cat") == "kernel":
                for key in ("Collective name", "In msg nelems", "Out msg nelems", "dtype"):
                    event["args"].pop(key, None)
                event["args"].pop("Group size", None)
        (tmp_path / name.removesuffix(".gz")).write_text(json.dumps(document))
    for folder in (nccl_folder, tmp_path):
        table = read_kineto_path(folder).table
        nccl = table.filter(
            pc.and_(
                pc.equal(table["kind"].cast(pa.string()), COMMUNICATION),
                pc.equal(table["level"], int(TraceLevel.HARDWARE)),
            )
        )
        assert set(nccl["collective_bytes"].to_pylist()) == {expected}
        assert set(nccl["group_size"].to_pylist()) == {2}
    sizes = collectives(Spans(read_kineto_path(tmp_path).table))
    assert sizes["size (MB)"].tolist() == [expected / 1e6] * 2


def _write_folder(folder: Path, ranks: list[int | None]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index, rank in enumerate(ranks):
        document = {"traceEvents": [], "baseTimeNanoseconds": 0}
        if rank is not None:
            document["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        (folder / f"trace{index}.json").write_text(json.dumps(document))


def test_bad_folders_are_one_line_naming_what_is_wrong(tmp_path: Path) -> None:
    _write_folder(tmp_path / "missing", [0, None])
    with pytest.raises(InvalidArgument, match=r"trace1\.json has no distributedInfo\.rank"):
        read_kineto_path(tmp_path / "missing")
    _write_folder(tmp_path / "twice", [1, 1])
    with pytest.raises(InvalidArgument, match=r"rank 1 twice, in trace0\.json and trace1\.json"):
        read_kineto_path(tmp_path / "twice")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgument, match="holds no Kineto traces"):
        read_kineto_path(tmp_path / "empty")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(InvalidArgument, match="neither a file nor a folder"):
        read_kineto_path(tmp_path / "pipe")
    with pytest.raises(NotFound, match="no trace file or folder"):
        read_kineto_path(tmp_path / "nowhere")


def _mlms(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_mlms(home, *args, COLUMNS="250")


def test_import_and_analyze_commands_on_real_gloo_ranks(gloo_folder: Path, tmp_path: Path) -> None:
    imported = _mlms(tmp_path, "import", "kineto", str(gloo_folder), "--model", "tp-mlp")
    assert imported.returncode == 0, imported.stderr
    assert "(the slowest rank's each)" in imported.stdout
    evaluation = imported.stdout.split("evaluation ")[1].split()[0]
    analyzed = _mlms(tmp_path, "analyze", evaluation)
    assert analyzed.returncode == 0, analyzed.stderr
    for title in ("time per rank (host activity", "communication overlapped", "rank skew"):
        assert title in analyzed.stdout
    assert "c10d::allreduce_" in analyzed.stdout and "all_reduce" in analyzed.stdout
    _write_folder(tmp_path / "twice", [0, 0])
    failed = _mlms(tmp_path, "import", "kineto", str(tmp_path / "twice"))
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [
        "mlms: error: rank 0 twice, in trace0.json and trace1.json: expected one trace per "
        "rank in the folder"
    ]


# Spans whose figures can be worked out by hand (ns). Rank 0: compute 100-400, an all-reduce
# 300-600 (100 ns under computation), a copy 700-800, an all-gather 900-1000; rank 1: compute
# 100-500, the all-reduce 550-600 (it arrives 250 ns after rank 0), no second collective.
def _hand_spans(*, with_rank: bool = True) -> list[SpanRecord]:
    spans = []

    def add(span_id, rank, level, name, kind, start, end, parent=None, **attributes):
        if with_rank:
            attributes["mlms.rank"] = rank
        device = f"cuda:{rank}" if level == TraceLevel.HARDWARE else None
        spans.append(
            SpanRecord(
                "t", span_id, parent, level, 1, name, kind, start, end, device=device,
                thread=None if device else rank, attributes=attributes,
            )
        )  # fmt: skip

    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    add("m0", 0, TraceLevel.MODEL, "predict", "model", 0, 1000, **{"mlms.batch_size": 1})
    add("l0", 0, TraceLevel.SYSTEM_LIBRARY, "cudaLaunchKernel", "runtime", 250, 260, "m0")
    add("k0", 0, TraceLevel.HARDWARE, "gemm", "kernel", 100, 400, "m0")
    add("c0", 0, TraceLevel.HARDWARE, nccl, COMMUNICATION, 300, 600, "l0",
        **{"collective.bytes": 1_200_000, "collective.group_size": 4})  # fmt: skip
    add("y0", 0, TraceLevel.HARDWARE, "Memcpy DtoH", "memcpy", 700, 800, "m0")
    add("g0", 0, TraceLevel.HARDWARE, "ncclDevKernel_AllGather_RING_LL", COMMUNICATION, 900,
        1000, "m0", **{"collective.bytes": 400, "collective.group_size": 4})  # fmt: skip
    add("m1", 1, TraceLevel.MODEL, "predict", "model", 0, 1200, **{"mlms.batch_size": 1})
    add("k1", 1, TraceLevel.HARDWARE, "gemm", "kernel", 100, 500, "m1")
    mangled = f"_Z40{nccl}24ncclDevKernelArgsStorageILm4096EE"  # as CUPTI names it
    add("c1", 1, TraceLevel.HARDWARE, mangled, COMMUNICATION, 550, 600, "m1")
    return spans


def _by_rank(frame, column: str) -> dict[int, float]:
    return dict(zip(frame["rank"], frame[column], strict=True))


def test_rank_breakdown_and_overlap_by_hand() -> None:
    spans = Spans(to_table(_hand_spans()))
    breakdown = rank_breakdown(spans)
    expected = {
        "compute (us)": {0: 0.3, 1: 0.4},
        "communication (us)": {0: 0.3, 1: 0.05},
        "memory (us)": {0: 0.1, 1: 0.0},
        "idle (us)": {0: 0.2, 1: 0.05},
        "span (us)": {0: 0.9, 1: 0.5},
        "non-compute (us)": {0: 0.4, 1: 0.05},
    }
    for column, values in expected.items():
        assert _by_rank(breakdown, column) == pytest.approx(values), column
    assert _by_rank(breakdown, "idle (%)") == pytest.approx({0: 100 * 200 / 900, 1: 10.0})
    overlap = comm_overlap(spans)
    assert _by_rank(overlap, "communication (us)") == pytest.approx({0: 0.4, 1: 0.05})
    assert _by_rank(overlap, "overlap (%)") == pytest.approx({0: 25.0, 1: 0.0})


def test_rank_skew_by_hand() -> None:
    skew = rank_skew(Spans(to_table(_hand_spans())))
    assert skew["iteration"].tolist() == [0, 0]
    assert skew["slowest rank"].tolist() == [1, 1]
    assert _by_rank(skew, "behind slowest (ms)") == pytest.approx({0: 200e-6, 1: 0.0})
    assert _by_rank(skew, "collectives") == {0: 2, 1: 1}
    # only the all-reduce has a partner: rank 0 joined it 250 ns before rank 1
    assert _by_rank(skew, "wait (ms)") == pytest.approx({0: 250e-6, 1: 0.0})


def test_a_rank_waits_in_a_collective_no_longer_than_it_ran_there() -> None:
    """An all-reduce that rank 0 issued 500 ns before rank 1 but that returned after 100 ns
    (an asynchronous issue, as gloo's are) waited 100 ns, not 500."""
    spans = [
        SpanRecord("t", f"m{rank}", None, TraceLevel.MODEL, 1, "predict", "model", 0, 2000,
                   thread=rank, attributes={"mlms.rank": rank, "mlms.batch_size": 1})
        for rank in (0, 1)
    ] + [
        SpanRecord("t", f"c{rank}", f"m{rank}", TraceLevel.FRAMEWORK, 1, "c10d::allreduce_",
                   COMMUNICATION, start, start + 100, thread=rank, layer_index=0,
                   attributes={"mlms.rank": rank})
        for rank, start in ((0, 200), (1, 700))
    ]  # fmt: skip
    skew = rank_skew(Spans(to_table(spans)))
    assert _by_rank(skew, "wait (ms)") == pytest.approx({0: 100e-6, 1: 0.0})


def test_collectives_bus_bandwidth_as_nccl_tests_by_hand() -> None:
    table = collectives(Spans(to_table(_hand_spans())))
    rows = {(r["rank"], r["collective"]): r for r in table.to_dict("records")}
    all_reduce = rows[(0, "all_reduce")]
    # 300 ns on rank 0, which joined 250 ns early: the transfer is rank 1's 50 ns
    assert all_reduce["mean (us)"] == pytest.approx(0.3)
    assert all_reduce["transfer (us)"] == pytest.approx(0.05)
    assert all_reduce["algbw (GB/s)"] == pytest.approx(1_200_000 / 50)  # bytes per ns
    assert all_reduce["busbw (GB/s)"] == pytest.approx(24_000 * 2 * 3 / 4)  # 2(n-1)/n, n=4
    all_gather = rows[(0, "all_gather")]
    assert all_gather["busbw (GB/s)"] == pytest.approx(4 * 3 / 4)  # (n-1)/n
    unknown = rows[(1, "all_reduce")]
    assert unknown["name"] == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"  # demangled
    assert unknown["ranks"] == 2  # no group size recorded: the trace's ranks
    assert unknown["size (MB)"] != unknown["size (MB)"]  # null, not guessed
    assert unknown["busbw (GB/s)"] != unknown["busbw (GB/s)"]


def test_host_activity_counts_a_collective_inside_an_op_as_communication() -> None:
    """A CPU run: an op around a collective (DTensor's Redistribute) waits on it; gloo's own
    work runs on its threads outside the predict's tree and still counts for its rank."""

    def span(span_id, level, name, kind, start, end, parent=None, layer=None, **attributes):
        return SpanRecord("t", span_id, parent, level, 1, name, kind, start, end, thread=1,
                          layer_index=layer, attributes={"mlms.rank": 0, **attributes})  # fmt: skip

    records = [
        span("m", TraceLevel.MODEL, "ProfilerStep#0", "model", 0, 200, **{"mlms.batch_size": 1}),
        span("r", TraceLevel.FRAMEWORK, "Redistribute", "other", 0, 100, "m", layer=0),
        span("c", TraceLevel.FRAMEWORK, "c10d::allreduce_", COMMUNICATION, 20, 80, "r"),
        span("g", TraceLevel.APPLICATION, "gloo:all_reduce", COMMUNICATION, 30, 90),
        span("a", TraceLevel.FRAMEWORK, "aten::addmm", "gemm", 100, 150, "m", layer=1),
    ]
    spans = Spans(to_table(records))
    row = rank_breakdown(spans).iloc[0]
    assert row["activity"] == "host" and row["batch_size"] == 1
    assert row["communication (us)"] == pytest.approx(0.07)  # 20-90
    assert row["compute (us)"] == pytest.approx(0.05)  # 100-150: not the op around it
    assert row["idle (us)"] == pytest.approx(0.01)  # 90-100 (the activity starts at 20)
    assert comm_overlap(spans).iloc[0]["overlap (%)"] == 0


def test_an_archive_without_ranks_is_one_rank() -> None:
    old = to_table(_hand_spans(with_rank=False)).drop_columns(["rank"])
    breakdown = rank_breakdown(Spans(old))
    assert breakdown["rank"].tolist() == [0]
    assert breakdown["span (us)"].tolist() == pytest.approx([0.9])


def _at(record, gpus: int, p50_ms: float, joules: float | None):
    """The real record as if run on ``gpus`` GPUs, its batch sizes at ``p50_ms``."""
    from mlms.evaluation.record import EnergyResult

    results = [
        result.model_copy(
            update={
                "latency_ms": result.latency_ms.model_copy(update={"p50": p50_ms}),
                "energy": None if joules is None else EnergyResult(joules_per_inference=joules),
            }
        )
        for result in record.results
    ]
    request = record.request.model_copy(update={"tensor_parallel": gpus})
    return record.model_copy(
        update={"id": f"{record.id[:-1]}{gpus}", "request": request, "results": results}
    )


def test_scaling_speedup_efficiency_and_energy_by_hand() -> None:
    from mlms.analysis.scaling import scaling
    from tests.evaluation_copies import real_record

    real = real_record()
    table = scaling([_at(real, 2, 8.0, 0.5), _at(real, 1, 10.0, 0.3), _at(real, 3, 12.0, None)])
    sizes = sorted({r.batch_size for r in real.results})
    assert table["batch size"].tolist() == [s for s in sizes for _ in range(3)]
    first = table[table["batch size"] == sizes[0]]
    assert first["GPUs"].tolist() == [1, 2, 3]
    two, three = first.iloc[1], first.iloc[2]
    assert two["speedup (x)"] == pytest.approx(10.0 / 8.0)
    assert two["efficiency (%)"] == pytest.approx(100 * 1.25 / 2)
    assert two["energy (J/inference)"] == 0.5
    assert three["speedup (x)"] == pytest.approx(10.0 / 12.0)  # slower on three
    assert three["energy (J/inference)"] != three["energy (J/inference)"]  # not measured
    assert scaling([real]).empty  # one GPU count: nothing to scale


def test_the_report_and_ui_show_ranks_only_for_several(gloo_folder: Path, tmp_path: Path) -> None:
    from mlms.analysis.kineto_record import import_record
    from mlms.report import build_report
    from mlms.store.local import LocalStore
    from mlms.tracer.archive import read_table, write_table

    store = LocalStore(tmp_path)
    trace = read_kineto_path(gloo_folder)
    record = import_record(
        trace,
        source="gloo",
        model="tp-mlp",
        batch_size=1,
        archive=write_table(store, trace.trace_id, trace.table),
    )
    page = build_report([record], Spans(read_table(store, trace.trace_id)))
    assert "Ranks (several GPUs)" in page and "Time per rank (temporal breakdown)" in page
    single = read_kineto_path(gloo_folder / "rank0.json")
    one = import_record(single, source="rank0", model="x", batch_size=1, archive="a")
    assert "Ranks (several GPUs)" not in build_report([one], Spans(single.table))
    from mlms.ui.pages import evaluation as evaluation_page

    assert "report#ranks" in evaluation_page(record, None)  # the UI's evaluation page
    assert "report#ranks" not in evaluation_page(one, None)


def test_chrome_export_gives_each_rank_its_own_tracks() -> None:
    from mlms.tracer.chrome import to_chrome

    names = {
        e["args"]["name"]
        for e in to_chrome(to_table(_hand_spans()))["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert {"rank 0 hardware", "rank 1 hardware"} <= names


def test_a_kernels_size_comes_from_the_collective_op_that_launched_it() -> None:
    """CUPTI gives an NCCL kernel no message size; the layer capture's collective op (its
    output bytes) above the kernel's launch does, so the bus bandwidth is not left empty."""
    nccl = "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE"
    chain = [  # id, level, name, kind, start, end, parent, attributes
        ("m", TraceLevel.MODEL, "predict", "model", 0, 1000, None, {"mlms.batch_size": 1}),
        ("o", TraceLevel.FRAMEWORK, "mlp/_c10d_functional::all_reduce", COMMUNICATION, 100, 200,
         "m", {"activation_bytes": 2_097_152}),
        ("l", TraceLevel.SYSTEM_LIBRARY, "cuLaunchKernelEx", "driver", 150, 160, "o", {}),
        ("c", TraceLevel.HARDWARE, nccl, COMMUNICATION, 300, 400, "l", {}),
    ]  # fmt: skip
    spans = [
        SpanRecord("t", f"{sid}{rank}", parent and f"{parent}{rank}", level, 1, name, kind,
                   start, end, device=f"cuda:{rank}" if level == TraceLevel.HARDWARE else None,
                   thread=None if level == TraceLevel.HARDWARE else rank,
                   attributes={**attributes, "mlms.rank": rank})
        for rank in (0, 1)
        for sid, level, name, kind, start, end, parent, attributes in chain
    ]  # fmt: skip
    row = collectives(Spans(to_table(spans))).to_dict("records")[0]
    assert row["size (MB)"] == pytest.approx(2.097152)
    assert row["algbw (GB/s)"] == pytest.approx(2_097_152 / 100)  # bytes per ns
    assert row["busbw (GB/s)"] == pytest.approx(2_097_152 / 100 * 2 * 1 / 2)  # n = 2 ranks
