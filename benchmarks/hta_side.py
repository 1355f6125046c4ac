"""HTA's side of benchmarks/kineto_vs_hta.py; runs in .venv-hta (HTA's own pandas and numpy).

Loads a folder of rank traces with ``TraceAnalysis`` and computes the GPU kernel breakdown,
every kernel by name (no "others" group, no memory copies or sets), then prints one JSON line
with the seconds both took and writes the per-kernel table as CSV (name, count, total/mean/
min/max in us). With ``--distributed``, the per-rank analyses instead, as a user of HTA runs
them on a multi-GPU run: the temporal breakdown and the communication/computation overlap,
one CSV row per rank.

    .venv-hta/bin/python benchmarks/hta_side.py TRACE_DIR OUT.csv [--distributed]
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    trace_dir, output = sys.argv[1], sys.argv[2]
    from hta.trace_analysis import TraceAnalysis

    began = time.perf_counter()
    # All steps (HTA drops the last one by default, as possibly incomplete).
    analyzer = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=True)
    loaded = time.perf_counter()
    if "--distributed" in sys.argv[3:]:
        breakdown = analyzer.get_temporal_breakdown(visualize=False)
        overlap = analyzer.get_comm_comp_overlap(visualize=False)
        done = time.perf_counter()
        breakdown.merge(overlap, on="rank").to_csv(output, index=False)
        print(json.dumps({"load_s": loaded - began, "breakdown_s": done - loaded}))
        return
    # Kernels only (no memcpy/memset), each by name: no "others" group.
    _, kernels = analyzer.get_gpu_kernel_breakdown(
        visualize=False, duration_ratio=1.0, num_kernels=1 << 30, include_memory_kernels=False
    )
    done = time.perf_counter()
    table = kernels.rename(
        columns={
            "sum (us)": "total_us",
            "mean (us)": "mean_us",
            "min (us)": "min_us",
            "max (us)": "max_us",
        }
    )
    table["count"] = (table["total_us"] / table["mean_us"]).round().astype("int64")
    table[["name", "count", "total_us", "mean_us", "min_us", "max_us"]].to_csv(output, index=False)
    print(json.dumps({"load_s": loaded - began, "breakdown_s": done - loaded}))


if __name__ == "__main__":
    main()
