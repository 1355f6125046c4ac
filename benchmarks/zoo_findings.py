"""The zoo sweep's findings as markdown tables, from its results folder as the GPU run kit brings
it back (``benchmarks/results/zoo_sweep_gpu/``: ``cells/<cell>/log.txt`` and ``cell.json``,
``store/`` with the records, sweeps and span archives), per task:

- latency against batch size: p50 at each batch size, strict fp32 and bf16 (the sweep's cells);
- where throughput saturates: the smallest swept batch after which no larger one gains 10 %
  (``SATURATION``: inputs/s at every larger batch < 1.1x at it), or "no" while still rising;
  inputs/s at the p50 (batch / p50), as a cell of a few iterations has a mean that one stalled
  iteration can halve;
- bf16 against fp32: the p50 ratio per batch size, and whether bf16 pays at the largest;
- launch-bound models: batch 16 in less than ``LAUNCH_BOUND``x batch 1's p50 (16 times the
  inputs for less than twice the time: most of batch 1's latency is the host launching kernels,
  not the GPU working), beside the GPU's busy share of a predict where the hardware level ran;
- layer types' shares of host time (the framework-level records at batch 16: on a GPU a
  layer's call returns once its kernels are queued) and of GPU time (the hardware-level
  records: the kernels joined to their layers), both ``mlms.analysis.layers.layer_types``;
- kernels' shares (the hardware-level records: ``mlms.analysis.kernels``);
- strict fp32 against TF32 and cuDNN's autotuning for the outliers' cells;
- the models that failed, with their one-line reasons.

The analyses are mlms's own queries over the span archives (DuckDB over Parquet); the latency
tables read the sweeps' cells and the records' results.

    .venv/bin/python benchmarks/zoo_findings.py benchmarks/results/zoo_sweep_gpu [--out F.md]
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mlms.analysis import kernels, layers
from mlms.analysis.engine import Spans
from mlms.catalog.zoo import get_model
from mlms.evaluation.record import EvaluationRecord
from mlms.evaluation.record_store import load_record
from mlms.evaluation.sweep import SweepCell, SweepState, load_sweep
from mlms.store.local import LocalStore

#: Throughput saturates at a batch when no larger swept batch has this many times its inputs/s.
SATURATION = 1.1
#: Launch-bound: batch 16's p50 under this many times batch 1's.
LAUNCH_BOUND = 2.0
#: bf16 pays where its p50 is under this share of strict fp32's.
BF16_PAYS = 0.8
TOP_KINDS = 3
TOP_KERNELS = 5
_EVALUATION = re.compile(r"^evaluation ([0-9a-f]{32})\b", re.MULTILINE)
#: The line a sweep prints of itself: its id.
SWEEP_LINE = re.compile(r"^sweep ([0-9a-f]{32}):", re.MULTILINE)
_ERROR = "mlms: error: "
_INTERRUPTED = ("mlms: aborted", "mlms: interrupted")  # mlms's lines for a SIGINT
_MODEL_MARK = "== "  # benchmarks/zoo_evals.py's line before each model's output


@dataclass(frozen=True)
class Results:
    """A results folder read once: the sweeps' cells, the records of each non-sweep cell."""

    folder: Path
    store: LocalStore
    cells: pd.DataFrame  # one row per sweep cell (latest state of each)
    by_cell: dict[str, list[EvaluationRecord]]  # the kit's cell name -> its records (a sweep's:
    # the completed evaluations of the sweep its log names)
    outcomes: dict[str, dict]  # the kit's cell name -> its cell.json

    @classmethod
    def read(cls, folder: Path) -> Results:
        store_root = folder / "store"
        if not store_root.is_dir():
            raise SystemExit(f"zoo_findings: {folder} has no store/: expected a kit results folder")
        store = LocalStore(store_root)
        outcomes, by_cell = {}, {}
        for marker in sorted((folder / "cells").glob("*/cell.json")):
            name = marker.parent.name
            outcomes[name] = json.loads(marker.read_text())
            log = _log(folder, name)
            ids = _EVALUATION.findall(log)
            for sweep in SWEEP_LINE.findall(log):
                done = load_sweep(store, sweep).cells
                ids += [cell.evaluation_id for cell in done if cell.state == "completed"]
            by_cell[name] = [load_record(store, i) for i in dict.fromkeys(ids)]
        return cls(folder, store, _sweep_cells(store), by_cell, outcomes)

    def records(self, prefix: str) -> list[EvaluationRecord]:
        return [r for name, own in self.by_cell.items() if name.startswith(prefix) for r in own]

    def spans(self, records: list[EvaluationRecord]) -> Spans:
        return Spans.from_store(self.store, [r.trace_id for r in records if r.trace_id])


def _log(folder: Path, cell: str) -> str:
    path = folder / "cells" / cell / "log.txt"
    return path.read_text(errors="replace") if path.is_file() else ""


def merged_sweep(store: LocalStore) -> SweepState | None:
    """Every stored sweep's cells as one sweep (the plan's chunks, the heavy models, jax), the
    oldest's id and spec; where a cell was swept twice (a cut chunk run again), a completed
    state wins over another, the later of two alike."""
    sweeps = [load_sweep(store, path.stem) for path in (store.root / "sweeps").glob("*.json")]
    if not sweeps:
        return None
    sweeps.sort(key=lambda sweep: sweep.created_at)
    cells: dict[tuple, SweepCell] = {}
    for cell in (cell for sweep in sweeps for cell in sweep.cells):
        key = (cell.group_key, cell.batch_size)
        if key not in cells or cell.state == "completed" or cells[key].state != "completed":
            cells[key] = cell
    return sweeps[0].model_copy(update={"cells": list(cells.values())})


def _sweep_cells(store: LocalStore) -> pd.DataFrame:
    """The merged sweep's cells, one row each."""
    sweep = merged_sweep(store)
    columns = list(SweepCell.model_fields)
    if sweep is None:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame([cell.model_dump() for cell in sweep.cells], columns=columns)


def _task(model: str) -> str:
    try:
        return get_model(model).task
    except Exception:  # a model the catalog no longer has: its findings still count
        return "unknown"


def _markdown(table: pd.DataFrame, floats: str = ".3g") -> str:
    if table.empty:
        return "(none)\n"
    return table.to_markdown(index=False, floatfmt=floats) + "\n"


def latency_table(cells: pd.DataFrame) -> pd.DataFrame:
    """p50 (ms) per model, precision and batch size: one column per precision and batch."""
    done = cells[cells.state == "completed"]
    wide = done.pivot_table(
        index="model", columns=["precision", "batch_size"], values="p50_ms", sort=False
    )
    wide.columns = [f"{precision} b{batch} (ms)" for precision, batch in wide.columns]
    return wide.reset_index()


def saturation_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model and precision: inputs/s at each batch and the batch where throughput
    saturates (``SATURATION``)."""
    rows = []
    done = cells[cells.state == "completed"].assign(at_p50=lambda t: 1e3 * t.batch_size / t.p50_ms)
    for (model, precision), group in done.groupby(["model", "precision"], sort=False):
        points = group.sort_values("batch_size")[["batch_size", "at_p50"]].to_numpy()
        row = {"model": model, "precision": precision}
        row |= {f"b{int(b)} (inputs/s)": t for b, t in points}
        row["saturates at"] = _saturation(points)
        rows.append(row)
    return pd.DataFrame(rows)


def _saturation(points) -> str:
    for index, (batch, throughput) in enumerate(points[:-1]):
        if all(later < SATURATION * throughput for _, later in points[index + 1 :]):
            return str(int(batch))
    return f"no (rising at {int(points[-1][0])})" if len(points) > 1 else "-"


def bf16_table(cells: pd.DataFrame) -> pd.DataFrame:
    """bf16's p50 over strict fp32's per model and batch size, and the verdict at the largest
    batch both ran."""
    done = cells[cells.state == "completed"]
    p50 = done.pivot_table(index=["model", "batch_size"], columns="precision", values="p50_ms",
                           sort=False)  # fmt: skip
    if not {"fp32", "bf16"} <= set(p50.columns):
        return pd.DataFrame()
    ratio = (p50["bf16"] / p50["fp32"]).dropna().rename("ratio").reset_index()
    wide = ratio.pivot(index="model", columns="batch_size", values="ratio")
    last = wide.apply(lambda row: row.dropna().iloc[-1] if row.notna().any() else None, axis=1)
    wide.columns = [f"bf16/fp32 b{b}" for b in wide.columns]
    wide["bf16 pays"] = [
        "yes" if v is not None and v < BF16_PAYS else ("no" if v is not None and v >= 0.95 else
                                                        "a little") for v in last
    ]  # fmt: skip
    return wide.reset_index()


def launch_table(cells: pd.DataFrame, busy: pd.DataFrame) -> pd.DataFrame:
    """Strict fp32's p50 at batch 16 (the largest swept up to it) over batch 1's, launch-bound
    where under ``LAUNCH_BOUND``; the GPU's busy share of a predict at batch 1 where the
    hardware level measured it."""
    done = cells[(cells.state == "completed") & (cells.precision == "fp32")]
    p50 = done.pivot_table(index="model", columns="batch_size", values="p50_ms", sort=False)
    small = sorted(b for b in p50.columns if b <= 16)
    if len(small) < 2:
        return pd.DataFrame()
    low, high = small[0], small[-1]
    ratio = f"b{high}/b{low}"
    table = pd.DataFrame({f"b{low} p50 (ms)": p50[low], f"b{high} p50 (ms)": p50[high]})
    table[ratio] = table[f"b{high} p50 (ms)"] / table[f"b{low} p50 (ms)"]
    table["launch-bound"] = table[ratio] < LAUNCH_BOUND
    table = table.reset_index()
    if not busy.empty:
        table = table.merge(busy, on="model", how="left")
    return table.sort_values(ratio)


def gpu_busy(results: Results) -> pd.DataFrame:
    """Per hardware-level model at batch 1: kernel time over predict time (the GPU's busy
    share, ``predict_kernel_time``)."""
    records = results.records("hardware")
    if not records:
        return pd.DataFrame()
    table = kernels.predict_kernel_time(results.spans(records))
    table = table[table.batch_size == 1]
    if table.empty:
        return pd.DataFrame()
    table["model"] = table.trace_id.map({r.trace_id: r.model.name for r in records})
    table["GPU busy at b1 (%)"] = 100 * table["kernel (ms)"] / table["predict (ms)"]
    return table[["model", "GPU busy at b1 (%)"]]


def layer_shares(results: Results) -> pd.DataFrame:
    """The ``TOP_KINDS`` layer types by share of layer time per framework-level model."""
    records = results.records("framework")
    if not records:
        return pd.DataFrame()
    table = layers.layer_types(results.spans(records))
    table["model"] = table.trace_id.map({r.trace_id: r.model.name for r in records})
    top = table.sort_values("share (%)", ascending=False).groupby("model", sort=False).head(
        TOP_KINDS
    )  # fmt: skip
    return _joined(top, "kind", "share (%)")


def layer_gpu_shares(results: Results) -> pd.DataFrame:
    """The ``TOP_KINDS`` layer types by share of the layers' GPU time (their kernels and
    copies) per hardware-level model and batch."""
    records = results.records("hardware")
    if not records:
        return pd.DataFrame()
    table = layers.layer_types(results.spans(records))
    table = table[table["GPU (ms)"] > 0].copy()
    if table.empty:
        return pd.DataFrame()
    total = table.groupby(["trace_id", "batch_size"])["GPU (ms)"].transform("sum")
    table["GPU share (%)"] = 100 * table["GPU (ms)"] / total
    table["model"] = table.trace_id.map({r.trace_id: r.model.name for r in records})
    top = table.sort_values("GPU share (%)", ascending=False).groupby(
        ["model", "batch_size"], sort=False
    ).head(TOP_KINDS)  # fmt: skip
    joined = _joined(top, "kind", "GPU share (%)", by=["model", "batch_size"])
    return joined.sort_values(["model", "batch_size"], ignore_index=True)


def kernel_shares(results: Results) -> pd.DataFrame:
    """The ``TOP_KERNELS`` kernels by share of GPU time per hardware-level model and batch."""
    records = results.records("hardware")
    if not records:
        return pd.DataFrame()
    table = kernels.kernel_breakdown(results.spans(records), TOP_KERNELS)
    if table.empty:
        return pd.DataFrame()
    table["model"] = table.trace_id.map({r.trace_id: r.model.name for r in records})
    return _joined(table, "kernel", "share (%)", by=["model", "batch_size"])


def _joined(table: pd.DataFrame, name: str, share: str, by: list[str] | None = None):
    """One row per group: its rows' names with their shares, largest first."""
    by = by or ["model"]
    text = table.assign(item=[f"{n} {s:.0f} %" for n, s in zip(table[name], table[share],
                                                               strict=True)])  # fmt: skip
    return text.groupby(by, sort=False)["item"].agg("; ".join).rename("top (share)").reset_index()


def outlier_table(results: Results) -> pd.DataFrame:
    """Per outlier model and batch: p50 in each of the outliers' runs, and strict fp32's over
    each of the others'."""
    rows = []
    for record in results.records("outliers"):
        run = record.request.precision + (" + cudnn benchmark" if record.request.cudnn_benchmark
                                          else "")  # fmt: skip
        for result in record.results:
            rows.append({"model": record.model.name, "batch": result.batch_size, "run": run,
                         "p50": result.latency_ms.p50})  # fmt: skip
    if not rows:
        return pd.DataFrame()
    wide = pd.DataFrame(rows).pivot_table(index=["model", "batch"], columns="run", values="p50",
                                          sort=False)  # fmt: skip
    runs = list(wide.columns)
    wide.columns = [f"{run} p50 (ms)" for run in runs]
    if "fp32" in runs:
        for run in runs:
            if run != "fp32":
                wide[f"fp32/{run}"] = wide["fp32 p50 (ms)"] / wide[f"{run} p50 (ms)"]
    return wide.reset_index()


def failures(results: Results) -> pd.DataFrame:
    """Each failed model with where and why: the sweeps' failed cells (one line per model,
    precision and reason), the error line of each model an eval cell could not run, and the
    kit's cells that failed or were cut."""
    rows = []
    cells = results.cells
    if not cells.empty:
        failed = cells[cells.state == "failed"]
        for (model, framework, precision, error), group in failed.groupby(
            ["model", "framework", "precision", failed.error.fillna("failed")], sort=False
        ):
            batches = ",".join(str(b) for b in sorted(group.batch_size))
            rows.append({"model": model, "where": f"sweep {framework} {precision} b{batches}",
                         "reason": _first_line(error)})  # fmt: skip
    for name, outcome in results.outcomes.items():
        log = _log(results.folder, name)
        for model, error in _eval_errors(log):
            rows.append({"model": model, "where": name, "reason": error})
        if outcome["status"] != "done" and not _swept_later(outcome, cells):
            # A failed cell's last error says why; a cut one's says only what the cut broke.
            errors = [line for line in log.splitlines() if line.startswith(_ERROR)]
            cut = outcome["status"] == "cut"
            last = f": {_first_line(errors[-1].removeprefix(_ERROR))}" if errors and not cut else ""
            rows.append({"model": "-", "where": name, "reason": f"cell {outcome['status']}{last}"})
    return pd.DataFrame(rows, columns=["model", "where", "reason"])


def _swept_later(outcome: dict, cells: pd.DataFrame) -> bool:
    """Whether ``outcome`` is a sweep cell whose every model has its every sweep cell
    completed: a chunk cut after some of its models and its other models swept by a later
    cell, which is no failure."""
    argv = outcome.get("argv", [])
    if outcome["status"] != "cut" or "sweep" not in argv or cells.empty:
        return False
    models = argv[argv.index("-m", argv.index("sweep")) + 1].split(",")
    mine = cells[cells.model.isin(models)]
    if "-f" in argv:
        mine = mine[mine.framework == argv[argv.index("-f") + 1]]
    return set(mine.model) == set(models) and bool((mine.state == "completed").all())


def _eval_errors(log: str) -> Iterable[tuple[str, str]]:
    """(model, error) of each error line after a model's mark (``zoo_evals``); a command's
    own closing error (a sweep's count of failed cells) has no mark before it. The model being
    evaluated when the process was interrupted (the kit's cut) ends the reading: what a process
    printed after an interrupt broke off an import is no finding."""
    model = None
    for line in log.splitlines():
        if line.startswith(_MODEL_MARK):
            model = line.removeprefix(_MODEL_MARK).strip()
        elif line.startswith(_INTERRUPTED) and model is not None:
            yield model, "interrupted: the cell was cut while it ran"
            return
        elif line.startswith(_ERROR) and model is not None:
            yield model, _first_line(line.removeprefix(_ERROR))


def _first_line(text: str) -> str:
    """The first line, its middle left out past 160 characters: a library's error says what
    failed at its end ("... not implemented for 'BFloat16'"), after a source path."""
    line = text.strip().splitlines()[0] if text.strip() else "failed"
    return line if len(line) <= 160 else f"{line[:60]} ... {line[-95:]}"


def sweep_rate(results: Results, cells: pd.DataFrame) -> str:
    """Completed sweep cells a minute: over the kit's sweep cells' wall time (processes'
    start-up, model loads and all; summed, so GPU time where cells ran side by side on several
    GPUs), and over the evaluations' own time (first cell's start to last cell's end of each
    evaluation, summed)."""
    done = cells[cells.state == "completed"]
    if done.empty:
        return "no completed sweep cells"
    wall = sum(o["wall_s"] for name, o in results.outcomes.items() if name.startswith("sweep"))
    by_evaluation = done.groupby("evaluation_id").agg(start=("started_at", "min"),
                                                      end=("finished_at", "max"))  # fmt: skip
    inside = (pd.to_datetime(by_evaluation.end) - pd.to_datetime(by_evaluation.start)).sum()
    seconds = inside.total_seconds()
    rates = [f"{len(done) / (s / 60):.1f} cells a minute over {s:.0f} s of {what}"
             for s, what in ((wall, "the kit's sweep cells"), (seconds, "evaluations"))
             if s > 0]  # fmt: skip
    return (f"{len(done)} sweep cells completed of {len(cells)} ({done.model.nunique()} models, "
            f"{len(by_evaluation)} evaluations): " + "; ".join(rates))  # fmt: skip


def _machine(results: Results) -> str:
    records = [r for own in results.by_cell.values() for r in own]
    if not records:
        return "no records"
    record = records[0]
    gpus = ", ".join(sorted({g.name for g in record.hardware.gpus})) or "no GPU"
    versions = f"{record.framework.name} {record.framework.version}"
    return f"{gpus} ({record.device}); {versions}; {record.hardware.cpu_brand}"


def _framework(cells: pd.DataFrame, name: str) -> pd.DataFrame:
    return cells[cells.framework == name] if not cells.empty else cells


def findings(folder: Path) -> str:
    results = Results.read(folder)
    torch_cells = _framework(results.cells, "torch")
    # The models of the eval cells too: one traced there need not be in a sweep.
    recorded = {r.model.name for own in results.by_cell.values() for r in own}
    tasks = {m: _task(m) for m in {*torch_cells.model, *recorded}}
    per_model = {
        "Latency against batch size: p50 (ms)": (latency_table(torch_cells), ".3g"),
        "Where throughput saturates (inputs/s at the p50; no larger batch gains "
        f"{SATURATION:.1f}x)": (saturation_table(torch_cells), ".4g"),
        f"bf16 against strict fp32 (p50 ratio; pays: < {BF16_PAYS} at the largest batch)": (
            bf16_table(torch_cells),
            ".2f",
        ),
        f"Launch-bound (fp32 p50 at batch 16 < {LAUNCH_BOUND:g}x batch 1)": (
            launch_table(torch_cells, gpu_busy(results)),
            ".3g",
        ),
        f"Layer types' shares of host time at batch 16 (framework level, top {TOP_KINDS}; on "
        "a GPU a layer's call returns once its kernels are queued: the host's share, not the "
        "GPU's)": (layer_shares(results), ".3g"),
        f"Layer types' shares of GPU time (hardware level: kernels joined to their layers, "
        f"top {TOP_KINDS})": (layer_gpu_shares(results), ".3g"),
        f"Kernels' shares (hardware level, top {TOP_KERNELS})": (kernel_shares(results), ".3g"),
    }
    rate = sweep_rate(results, torch_cells) if not torch_cells.empty else "none"
    parts = [f"# Zoo findings: {folder.name}\n", f"Machine: {_machine(results)}.\n",
             f"Sweep: {rate}.\n", "## Cells\n", _markdown(cell_table(results), ".4g")]  # fmt: skip
    for task in sorted(set(tasks.values())):
        parts.append(f"## {task}\n")
        for title, (table, form) in per_model.items():
            own = table[table.model.map(tasks) == task] if not table.empty else table
            parts += [f"### {title}\n", _markdown(own, form)]
    jax_cells = _framework(results.cells, "jax")
    parts += [
        "## Strict fp32 against TF32 and cuDNN's autotuning (the outliers)\n",
        _markdown(outlier_table(results), ".3g"),
        "## jax: p50 (ms)\n",
        _markdown(latency_table(jax_cells) if not jax_cells.empty else pd.DataFrame()),
        "## Failures\n",
        _markdown(failures(results)),
    ]
    return "\n".join(parts)


def cell_table(results: Results) -> pd.DataFrame:
    """The kit's cells: status, wall seconds and the records each stored; and the GPU each ran
    on where the kit ran cells side by side, one on each GPU (``--one-gpu-each``)."""
    rows = [
        {"cell": name, "status": outcome["status"], "wall (s)": outcome["wall_s"],
         "records": len(results.by_cell.get(name, [])), "GPU": outcome.get("pinned_to")}
        for name, outcome in results.outcomes.items()
    ]  # fmt: skip
    table = pd.DataFrame(rows)
    if "GPU" in table and table["GPU"].notna().any():
        return table
    return table.drop(columns="GPU", errors="ignore")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the kit's results folder of zoo_sweep")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here too")
    args = parser.parse_args()
    text = findings(args.results)
    if args.out is not None:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
