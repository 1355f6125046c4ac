"""Where a sweep's wall time went, evaluation by evaluation, from a results folder as the GPU run
kit brings it back (``benchmarks/results/zoo_sweep_gpu/``): the sweep's ``started_at`` and
``finished_at`` per evaluation, and the pipeline-level spans of its span archive.

Columns, in seconds:

- wall: from the evaluation's start to its end in the sweep;
- outside: wall less the ``evaluation`` span: the device found, the asset checked, the synthetic
  input pool made, the model loaded onto the device (all before the span opens), the record and
  archive written (after); the first evaluation of a process adds CUDA's start;
- warm-up: the batch sizes' spans less their runs' (the untraced warm-up: input, predict and
  post-processing, once per batch size);
- preprocess (the batch taken from the pool), input copy, predict (the model span; it holds the
  copy of the outputs to the host), postprocess (its steps' total in brackets where one
  dominates): the measured runs' spans;
- after: the evaluation span less its batch sizes' (the predictions of the first 16 inputs,
  accuracy where the model has a data set).

    .venv/bin/python benchmarks/sweep_time_split.py benchmarks/results/zoo_sweep_gpu \
        sweep_heavy_00 sweep_heavy_01 sweep_heavy_rcnn sweep_00
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.zoo_findings import SWEEP_LINE  # noqa: E402
from mlms.evaluation.record_store import load_record  # noqa: E402
from mlms.evaluation.sweep import load_sweep  # noqa: E402
from mlms.store.local import LocalStore  # noqa: E402
from mlms.tracer.archive import local_archive  # noqa: E402

STAGES = ("preprocess", "input copy", "predict", "postprocess")


def spans_by_name(archive: Path) -> dict[str, float]:
    """Seconds in each pipeline-level span name (the postprocess steps' among them)."""
    rows = duckdb.sql(
        f"select name, sum(end_ns - start_ns) / 1e9 from '{archive}' where level = 1 group by name"
    ).fetchall()
    return dict(rows)


def split(store: LocalStore, sweep_id: str) -> list[dict[str, object]]:
    spans: dict[str, tuple[float, float]] = {}
    for cell in load_sweep(store, sweep_id).cells:
        if cell.evaluation_id is None or cell.started_at is None or cell.finished_at is None:
            continue
        start, end = cell.started_at.timestamp(), cell.finished_at.timestamp()
        first, last = spans.get(cell.evaluation_id, (start, end))
        spans[cell.evaluation_id] = (min(first, start), max(last, end))
    rows = []
    for evaluation, (start, end) in spans.items():
        record = load_record(store, evaluation)
        if record.trace_id is None:
            continue
        named = spans_by_name(local_archive(store, record.trace_id))
        batches = sum(v for k, v in named.items() if k.startswith("batch_size="))
        runs = sum(v for k, v in named.items() if k.startswith("run "))
        steps = {
            k: v
            for k, v in named.items()
            if k not in STAGES and k != "evaluation" and not k.startswith(("batch_size=", "run "))
        }
        biggest = max(steps.items(), key=lambda item: item[1], default=None)
        rows.append(
            {
                "model": record.request.model,
                "precision": record.request.precision,
                "wall": end - start,
                "outside": end - start - named["evaluation"],
                "warm-up": batches - runs,
                **{stage: named.get(stage, 0.0) for stage in STAGES},
                "step": biggest,
                "after": named["evaluation"] - batches,
                "other": runs - sum(named.get(stage, 0.0) for stage in STAGES),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("cells", nargs="+")
    args = parser.parse_args()
    columns = ["wall", "outside", "warm-up", *STAGES, "after", "other"]
    for cell in args.cells:
        log = (args.results / "cells" / cell / "log.txt").read_text()
        found = SWEEP_LINE.search(log)
        if found is None:
            print(f"{cell}: no sweep in its log")
            continue
        rows = split(LocalStore(args.results / "store"), found.group(1))
        print(f"\n{cell} (sweep {found.group(1)}), seconds\n")
        print("| model | precision | " + " | ".join(columns) + " |")
        print("|---|---|" + "---:|" * len(columns))
        for row in [*rows, _total(rows, columns)]:
            cells = [f"{row[c]:.2f}" for c in columns]
            if row.get("step") and row["step"][1] > 0.5 * float(row["postprocess"]):
                name, seconds = row["step"]
                cells[columns.index("postprocess")] += f" ({name} {seconds:.2f})"
            print(f"| {row['model']} | {row['precision']} | " + " | ".join(cells) + " |")


def _total(rows: list[dict[str, object]], columns: list[str]) -> dict[str, object]:
    return {
        "model": "**all**",
        "precision": "",
        **{column: sum(float(row[column]) for row in rows) for column in columns},
    }


if __name__ == "__main__":
    main()
