"""A results folder of the zoo sweep's size from a small one (the plan's dry run), for timing
``site_zoo.py`` without a GPU: one model's completed records of the torch sweep (its fp32 and
bf16 evaluations, real records and span archives) copied under every name the plan sweeps, each
copy with an archive of its own (new evaluation, trace and span ids), in one sweep.

    .venv/bin/python benchmarks/gpu_kit.py run zoo_sweep /tmp/dry --dry
    .venv/bin/python benchmarks/gpu_kit.py unpack /tmp/dry --into /tmp/zoo_dry
    .venv/bin/python benchmarks/site_zoo_folder.py /tmp/zoo_dry /tmp/zoo_84 --model squeezenet1_1
    .venv/bin/python benchmarks/site_zoo.py /tmp/zoo_84 -o /tmp/zoo-site
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.zoo_findings import merged_sweep  # noqa: E402
from benchmarks.zoo_sweep_order import sweep_order  # noqa: E402


def copy_folder(source: Path, target: Path, model: str) -> int:
    """``target``'s store: ``model``'s torch cells of ``source``'s merged sweep once for each
    zoo model; the number of cells."""
    from mlms.evaluation.record_store import load_record, save_record
    from mlms.evaluation.sweep import save_sweep
    from mlms.store.local import LocalStore
    from mlms.tracer.archive import local_archive

    store, into = LocalStore(source / "store"), LocalStore(target / "store")
    sweep = merged_sweep(store)
    if sweep is None:
        raise SystemExit(f"site_zoo_folder: {source}/store holds no sweep")
    template = [c for c in sweep.cells if c.model == model and c.framework == "torch"]
    if not any(c.state == "completed" for c in template):
        raise SystemExit(f"site_zoo_folder: no completed torch cell of {model!r} in {source}")
    cells = []
    for name in sweep_order():
        copies: dict[str, str] = {}
        for cell in template:
            if cell.state == "completed" and cell.evaluation_id not in copies:
                record = load_record(store, cell.evaluation_id)
                trace_id = uuid.uuid4().hex
                archive = _renamed(pq.read_table(local_archive(store, record.trace_id)), trace_id)
                path = into.path_of(f"traces/{trace_id}/spans.parquet")
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(archive, path)
                copy = record.model_copy(
                    update={
                        "id": uuid.uuid4().hex,
                        "trace_id": trace_id,
                        "model": record.model.model_copy(update={"name": name}),
                    }
                )
                save_record(into, copy)
                copies[cell.evaluation_id] = copy.id
            cells.append(
                cell.model_copy(
                    update={"model": name, "evaluation_id": copies.get(cell.evaluation_id)}
                )
            )
    save_sweep(into, sweep.model_copy(update={"cells": cells}))
    return len(cells)


def _renamed(table: pa.Table, trace_id: str) -> pa.Table:
    """The archive under ``trace_id``, its span ids made new (unique across the copies)."""

    def new_ids(column: str) -> pa.Array:
        return pa.array(
            [None if v is None else hashlib.md5((trace_id + v).encode()).hexdigest()[:16]
             for v in table[column].to_pylist()],
            pa.string(),
        )  # fmt: skip

    for column, values in (
        ("trace_id", pa.array([trace_id] * table.num_rows, pa.string())),
        ("span_id", new_ids("span_id")),
        ("parent_id", new_ids("parent_id")),
    ):
        table = table.set_column(table.schema.get_field_index(column), column, values)
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a results folder (the dry run's, unpacked)")
    parser.add_argument("target", type=Path, help="the new results folder (made)")
    parser.add_argument("--model", default="squeezenet1_1", help="the model whose cells copy")
    args = parser.parse_args()
    cells = copy_folder(args.source, args.target, args.model)
    print(f"{args.target}: {len(sweep_order())} models, {cells} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
