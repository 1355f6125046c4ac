"""Decoding a trace archive on the calling thread against Arrow's thread pool, by size: where
``mlms.tracer.archive.read_parquet`` switches between the two (``THREADED_READ_BYTES``), and
what it reads in at each size.

The H100 capture of tests/data, tiled to each ``--kernels`` count as a full run archives it
(``benchmarks/analysis_scale.py``'s fixture), is written once; then ``read_parquet`` (the
product's read) and the same bytes decoded on the calling thread and on the pool are timed in
turn, ``--repeats`` each, with the archive's dictionary columns as ``read_table`` reads them.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/archive_read.py [--kernels 2000,20000,200000]
        [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.analysis_scale import fixture_archive, tiled
from mlms.tracer.archive import DICTIONARY_COLUMNS, THREADED_READ_BYTES, read_parquet, to_parquet


def alternating(data: bytes, repeats: int) -> dict[str, float]:
    """Median milliseconds of ``read_parquet`` and of decoding ``data`` on the calling thread
    and on the pool, each run ``repeats`` times in turn after one untimed read of each."""

    def decode(threads: bool) -> pa.Table:
        reader = pq.ParquetFile(pa.BufferReader(data), read_dictionary=DICTIONARY_COLUMNS)
        return reader.read(use_threads=threads)

    reads = {
        "read_parquet": lambda: read_parquet(data, read_dictionary=DICTIONARY_COLUMNS),
        "one thread": lambda: decode(False),
        "pool": lambda: decode(True),
    }
    times: dict[str, list[float]] = {name: [] for name in reads}
    for round_ in range(repeats + 1):
        for name, read in reads.items():
            began = time.perf_counter()
            read()
            if round_:
                times[name].append((time.perf_counter() - began) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="2000,20000,200000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    base = fixture_archive()
    print(f"read_parquet decodes on the pool from {THREADED_READ_BYTES / 2**20:.1f} MiB")
    for kernels in (int(k) for k in args.kernels.split(",")):
        data = to_parquet(tiled(base, kernels, "launches"))
        medians = alternating(data, args.repeats)
        shown = ", ".join(f"{name} {ms:.1f} ms" for name, ms in medians.items())
        print(f"{len(data) / 2**20:6.1f} MiB: {shown}")


if __name__ == "__main__":
    main()
