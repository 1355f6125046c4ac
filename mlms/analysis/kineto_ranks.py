"""A folder of Kineto rank traces (one file a process, as HTA's ``TraceAnalysis(trace_dir)``
reads them) as one trace: every rank's spans with their ``rank``, side by side on the clock
the files share (Kineto's timestamps are the host's wall clock, so ranks of one host line up).

Each file is parsed as a single trace is (``mlms.analysis.kineto_import``), one after another
(DuckDB already parses each on every core; two at once measured no faster); their rows are
numbered one after another so that span ids stay unique, and the trace id hashes the files'
own sha256s in rank order: the same folder imports to the same trace. The rank is the file's
``distributedInfo.rank`` (torch.profiler writes it where torch.distributed runs); a file in
the folder without one, or two files of one rank, is an error naming the files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from mlms.analysis.kineto_import import (
    KinetoTrace,
    ParsedTrace,
    check_batch_size,
    parse_kineto,
    read_kineto,
)
from mlms.errors import InvalidArgument, NotFound
from mlms.tracer.communication import KERNEL_KINDS
from mlms.tracer.levels import TraceLevel

SUFFIXES = (".json", ".json.gz")
EXPECTED = "expected a Kineto trace (.json or .json.gz) or a folder of rank traces"


def read_kineto_path(path: Path, *, batch_size: int = 1) -> KinetoTrace:
    """A Kineto trace file, or a folder of rank traces, as one imported trace."""
    check_batch_size(batch_size)
    if path.is_dir():
        return read_rank_folder(path, batch_size=batch_size)
    if path.is_file():
        return read_kineto(path, batch_size=batch_size)
    if not path.exists():
        raise NotFound(f"no trace file or folder {path}: {EXPECTED}")
    raise InvalidArgument(f"{path} is neither a file nor a folder: {EXPECTED}")


def rank_files(folder: Path) -> list[Path]:
    """The trace files of a folder (``*.json``, ``*.json.gz``), by name."""
    files = sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIXES) and p.is_file())
    if not files:
        raise InvalidArgument(
            f"{folder} holds no Kineto traces (*.json, *.json.gz): expected a folder of rank "
            "traces as torch.profiler writes them"
        )
    return files


def read_rank_folder(folder: Path, *, batch_size: int = 1) -> KinetoTrace:
    """Every rank trace of ``folder`` as one trace (module docstring)."""
    check_batch_size(batch_size)
    parsed: dict[int, tuple[Path, ParsedTrace]] = {}
    for file in rank_files(folder):
        trace = parse_kineto(file)  # DuckDB parses each file on every core already
        if trace.rank is None:
            raise InvalidArgument(
                f"{file} has no distributedInfo.rank: expected each trace of a folder of rank "
                "traces to name its rank (torch.profiler records it under torch.distributed)"
            )
        if trace.rank in parsed:
            raise InvalidArgument(
                f"rank {trace.rank} twice, in {parsed[trace.rank][0].name} and {file.name}: "
                "expected one trace per rank in the folder"
            )
        parsed[trace.rank] = (file, trace)
    ordered = [parsed[rank] for rank in sorted(parsed)]
    sha256 = hashlib.sha256("".join(t.sha256 for _, t in ordered).encode()).hexdigest()
    trace_id = sha256[:32]
    tables, first_row = [], 0
    for _, trace in ordered:
        tables.append(trace.spans(trace_id, batch_size, first_row))
        first_row += trace.rows.num_rows
    return KinetoTrace(
        table=pa.concat_tables(tables).unify_dictionaries(),
        trace_id=trace_id,
        sha256=sha256,
        metadata=ordered[0][1].metadata,
        sources={rank: file.name for rank, (file, _) in sorted(parsed.items())},
    )


def kernel_sums(table: pa.Table) -> dict[tuple[int | None, str], tuple[int, int]]:
    """(rank, kind) -> (kernels, their summed durations in ns), for the kernel kinds
    (``kernel``, ``communication``: NCCL's): what each raw trace's own sums must equal."""
    kernels = table.filter(
        pc.and_(
            pc.equal(table["level"], int(TraceLevel.HARDWARE)),
            pc.is_in(table["kind"].cast(pa.string()), pa.array(KERNEL_KINDS)),
        )
    )
    sums = (
        pa.table(
            {
                "rank": kernels["rank"],
                "kind": kernels["kind"].cast(pa.string()),
                "ns": pc.subtract(kernels["end_ns"], kernels["start_ns"]),
            }
        )
        .group_by(["rank", "kind"])
        .aggregate([("ns", "count"), ("ns", "sum")])
    )
    return {
        (rank, kind): (count, total)
        for rank, kind, count, total in zip(
            *(sums[c].to_pylist() for c in ("rank", "kind", "ns_count", "ns_sum")), strict=True
        )
    }
