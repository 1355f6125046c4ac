"""The whole analysis set over an archive of a million kernel spans: wall time, peak RSS, spans/s.

The archive is a real one repeated: by default the H100 capture in ``tests/data`` (three
predicts of resnet18 at batch size 4 through the tracer and the counter join, as a ``full``
run archives them), or any mlms archive (``--archive traces/<id>/spans.parquet``, e.g. from
``mlms eval --hw h100 --trace-level hardware``). Its spans are copied, with new ids and shifted
in time, until the kernels number ``--kernels``: the structure (layers, API calls, kernels,
counters, parent links) is the real one, only longer. Each figure is measured in a fresh
process (``--measure``) so that its peak RSS is the analysis's own.

    python benchmarks/analysis_scale.py                       # 1,000,000 kernels
    python benchmarks/analysis_scale.py --kernels 200000 --archive PATH
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fixture_archive() -> pa.Table:
    """The H100 capture of tests/data as a full run archives it (see tests/gpu_capture.py)."""
    from mlms.tracer.archive import to_table
    from tests import gpu_capture

    return to_table(gpu_capture.full_run(gpu_capture.load()))


def tiled(base: pa.Table, kernels: int, api: str) -> pa.Table:
    """``base`` repeated (new span ids, later times) until it holds ``kernels`` kernel spans.

    ``api="launches"`` keeps only the API calls that launched GPU work (a kernel's own call);
    ``"all"`` keeps every call CUPTI recorded (about 14 a kernel on the H100 capture:
    cudaGetDevice, cuDevicePrimaryCtxGetState, ...)."""
    import duckdb

    connection = duckdb.connect()
    connection.register("everything", base)
    keep = "TRUE"
    if api == "launches":
        keep = (
            "level <> 5 OR span_id IN "
            "(SELECT parent_id FROM everything WHERE level = 6 AND parent_id IS NOT NULL)"
        )
    connection.sql(f"CREATE TABLE base AS SELECT * FROM everything WHERE {keep}")
    per_copy, period = connection.sql(
        "SELECT count(*) FILTER (WHERE kind = 'kernel'), max(end_ns) - min(start_ns) + 1000 "
        "FROM base"
    ).fetchall()[0]
    copies = -(-kernels // per_copy)
    return connection.sql(
        f"""
        SELECT base.* REPLACE (
            span_id || '.' || copy AS span_id,
            parent_id || '.' || copy AS parent_id,
            start_ns + copy * {period} AS start_ns,
            end_ns + copy * {period} AS end_ns)
        FROM base, range({copies}) AS copies(copy)
        """
    ).to_arrow_table()


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, it starts afresh at exec,
    so the parent that made the archive does not count)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def analyse(path: Path) -> dict[str, float]:
    """Run every analysis over the archive at ``path``; seconds per step."""

    from mlms.analysis import kernels, layers, timeline
    from mlms.analysis.engine import Spans

    seconds: dict[str, float] = {}
    peaks: dict[str, float] = {}

    def timed(name, work):
        start = time.perf_counter()
        result = work()
        seconds[name] = time.perf_counter() - start
        peaks[name] = peak_rss_mb()
        return result

    spans = timed("derive tables", lambda: Spans.from_parquet([path]))
    timed("layer table", lambda: layers.layer_table(spans))
    timed("layer executions", lambda: layers.layer_executions(spans))
    timed("layer types", lambda: layers.layer_types(spans))
    timed("model costs", lambda: layers.model_costs(spans))
    timed("slowest layers", lambda: layers.slowest_layers(spans))
    timed("kernel table", lambda: kernels.kernel_table(spans))
    timed("kernel breakdown", lambda: kernels.kernel_breakdown(spans))
    timed("layer kernels", lambda: kernels.layer_kernels(spans))
    for level in ("kernel", "layer", "model"):
        timed(f"roofline ({level})", lambda level=level: kernels.roofline(spans, level))
    timed("peaks", lambda: kernels.peaks_of(spans))
    trace_id, batch_size = spans.frame("SELECT trace_id, batch_size FROM predicts LIMIT 1").iloc[0]
    timed(
        "iteration timeline",
        lambda: timeline.iteration_timeline(spans, str(trace_id), int(batch_size)),
    )
    counts = {
        "spans": len(spans),
        "kernels": spans.scalar("SELECT count(*) FROM spans WHERE kind = 'kernel'"),
    }
    return {"seconds": seconds, "peak rss (MB)": peaks, "counts": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--archive", type=Path, help="an mlms spans.parquet to repeat")
    parser.add_argument(
        "--api",
        choices=["launches", "all"],
        default="launches",
        help="keep the API calls that launched GPU work (default) or every recorded call",
    )
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # the child: analyse, print the figures as JSON
        print(json.dumps(analyse(args.measure)))
        return

    from mlms.tracer.archive import read_parquet, to_parquet

    base = read_parquet(args.archive) if args.archive else fixture_archive()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spans.parquet"
        started = time.perf_counter()
        table = tiled(base, args.kernels, args.api)
        path.write_bytes(to_parquet(table))  # as the archive writer lays it out
        made = time.perf_counter() - started
        size_mb = path.stat().st_size / 1e6
        del table
        child = subprocess.run(
            [sys.executable, __file__, "--measure", str(path)],
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            sys.exit(f"the measuring process failed:\n{child.stderr[-3000:]}")
    figures = json.loads(child.stdout.strip().splitlines()[-1])
    seconds, peaks = figures["seconds"], figures["peak rss (MB)"]
    spans, kernel_count = figures["counts"]["spans"], figures["counts"]["kernels"]
    rss = max(peaks.values())
    total = sum(seconds.values())
    source = args.archive or "the H100 capture in tests/data (resnet18, batch 4, full)"
    print(f"archive: {source}, repeated to {kernel_count:,} kernels, {spans:,} spans")
    print(f"         (API calls kept: {args.api})")
    print(f"         ({size_mb:.0f} MB of Parquet, made in {made:.1f} s)")
    print(f"{'step':<22} {'seconds':>8} {'peak RSS so far (MB)':>22}")
    for name, value in seconds.items():
        print(f"{name:<22} {value:8.3f} {peaks[name]:22,.0f}")
    print(f"{'whole analysis set':<22} {total:8.3f}   (target <= 5 s)")
    print(f"peak RSS: {rss:,.0f} MB   (target <= 2,048 MB)")
    print(f"spans/s: {spans / total:,.0f}   kernels/s: {kernel_count / total:,.0f}")


if __name__ == "__main__":
    main()
