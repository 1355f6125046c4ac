"""How far two runs of a sweep agree: for every cell completed in both results folders (as the
GPU run kit brings them back, ``store/sweeps/*.json``), the later run's p50 over the earlier
one's, summarised per batch size (median, 10th and 90th percentiles, the share within 5 % and
10 %), and the cells that moved most.

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
from mlms.store.local import LocalStore  # noqa: E402

KEY = ["model", "framework", "precision", "batch_size", "hw"]


def completed(folder: Path) -> pd.DataFrame:
    """The completed cells of ``folder``'s sweeps merged (``zoo_findings.merged_sweep``: a cell
    swept twice there, a cut chunk run again, keeps its later completed run), one row each."""
    if not (folder / "store" / "sweeps").is_dir():
        raise SystemExit(f"sweep_agreement: {folder} has no store/sweeps/: expected a results "
                         "folder as the GPU run kit's unpack writes it")  # fmt: skip
    sweep = merged_sweep(LocalStore(folder / "store"))
    rows = [cell.model_dump() for cell in sweep.cells if cell.state == "completed"] if sweep else []
    if not rows:
        raise SystemExit(f"sweep_agreement: {folder} holds no completed sweep cell")
    return pd.DataFrame(rows)[[*KEY, "p50_ms"]]


def agreement(earlier: pd.DataFrame, later: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per batch size, the later/earlier p50 ratios' summary; and every shared cell's ratio."""
    both = earlier.merge(later, on=KEY, suffixes=(" earlier", " later"))
    both["ratio"] = both["p50_ms later"] / both["p50_ms earlier"]
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
    print("\nmoved most:\n")
    print(moved[[*KEY[:4], "p50_ms earlier", "p50_ms later", "ratio"]].to_markdown(
        index=False, floatfmt=".3g"))  # fmt: skip


if __name__ == "__main__":
    main()
