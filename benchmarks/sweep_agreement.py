"""How far two runs of a sweep agree: for every cell completed in both results folders (as the
GPU run kit brings them back, ``store/sweeps/*.json``), the later run's p50 over the earlier
one's, summarised per batch size (median, 10th and 90th percentiles, the share within 5 % and
10 %), and the cells that moved most. Where the records carry their run conditions (the SM
clock read with the power, the host's CPU steal), the moved cells show them, and how far the
p50's moves follow the clock's (the correlation of their logs over the cells with both).

    .venv/bin/python benchmarks/sweep_agreement.py benchmarks/results/zoo_sweep_repeat/first \
        benchmarks/results/zoo_sweep_repeat/second
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.zoo_findings import merged_sweep  # noqa: E402
from mlms.evaluation.record_store import is_stored, load_record  # noqa: E402
from mlms.store.local import LocalStore  # noqa: E402

KEY = ["model", "framework", "precision", "batch_size", "hw"]


def completed(folder: Path) -> pd.DataFrame:
    """The completed cells of ``folder``'s sweeps merged (``zoo_findings.merged_sweep``: a cell
    swept twice there, a cut chunk run again, keeps its later completed run), one row each."""
    if not (folder / "store" / "sweeps").is_dir():
        raise SystemExit(f"sweep_agreement: {folder} has no store/sweeps/: expected a results "
                         "folder as the GPU run kit's unpack writes it")  # fmt: skip
    store = LocalStore(folder / "store")
    sweep = merged_sweep(store)
    done = [cell for cell in sweep.cells if cell.state == "completed"] if sweep else []
    if not done:
        raise SystemExit(f"sweep_agreement: {folder} holds no completed sweep cell")
    conditions = {}
    # A sweep brought back without its records (a state file alone) has p50s and no conditions.
    for evaluation_id in {c.evaluation_id for c in done if is_stored(store, c.evaluation_id)}:
        for result in load_record(store, evaluation_id).results:
            conditions[evaluation_id, result.batch_size] = result.conditions
    rows = []
    for cell in done:
        seen = conditions.get((cell.evaluation_id, cell.batch_size))
        rows.append(
            {
                **cell.model_dump(),
                "sm_mhz": seen.sm_clock_mhz if seen else None,
                "steal_pct": 100 * seen.cpu_steal if seen and seen.cpu_steal is not None else None,
            }
        )
    return pd.DataFrame(rows)[[*KEY, "p50_ms", "sm_mhz", "steal_pct"]]


def agreement(earlier: pd.DataFrame, later: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per batch size, the later/earlier p50 ratios' summary; and every shared cell's ratio."""
    both = earlier.merge(later, on=KEY, suffixes=(" earlier", " later"))
    both["ratio"] = both["p50_ms later"] / both["p50_ms earlier"]
    both["clock ratio"] = both["sm_mhz later"] / both["sm_mhz earlier"]
    off = (both.ratio - 1).abs()
    summary = (
        both.assign(w5=off <= 0.05, w10=off <= 0.10)
        .groupby("batch_size")
        .agg(
            cells=("ratio", "size"),
            median=("ratio", "median"),
            p10=("ratio", lambda r: np.percentile(r, 10)),
            p90=("ratio", lambda r: np.percentile(r, 90)),
            within_5=("w5", "mean"),
            within_10=("w10", "mean"),
        )
    )
    return summary.reset_index(), both


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("earlier", type=Path)
    parser.add_argument("later", type=Path)
    parser.add_argument("--framework", help="only this framework's cells")
    parser.add_argument("--worst", type=int, default=8, help="how many of the largest moves")
    args = parser.parse_args()
    earlier, later = completed(args.earlier), completed(args.later)
    if args.framework:
        earlier = earlier[earlier.framework == args.framework]
        later = later[later.framework == args.framework]
    summary, both = agreement(earlier, later)
    if both.empty:
        raise SystemExit("sweep_agreement: the two folders share no completed cell")
    print(f"later / earlier p50: {len(both)} cells in both\n")
    print(summary.to_markdown(index=False, floatfmt=("g", "g", ".3f", ".3f", ".3f", ".2f", ".2f")))
    moved = both.iloc[(both.ratio.apply(np.log).abs()).argsort()[::-1][: args.worst]]
    shown = [*KEY[:4], "p50_ms earlier", "p50_ms later", "ratio"]
    clocked = both.dropna(subset=["clock ratio"])
    if not both[["steal_pct earlier", "steal_pct later"]].isna().all().all():
        shown += ["steal_pct earlier", "steal_pct later"]
    if not clocked.empty:
        shown += ["sm_mhz earlier", "sm_mhz later"]
    print("\nmoved most:\n")
    print(moved[shown].to_markdown(index=False, floatfmt=".3g"))
    if len(clocked) > 2:
        follows = np.corrcoef(np.log(clocked.ratio), np.log(clocked["clock ratio"]))[0, 1]
        print(f"\nlog p50 ratio against log SM clock ratio, {len(clocked)} cells with both: "
              f"correlation {follows:.2f} (near -1: the clock explains the moves)")  # fmt: skip


if __name__ == "__main__":
    main()
