"""Charts (PNG, matplotlib's Agg backend: no display needed). Each takes a table computed in
``mlms.analysis`` and a path; nothing here computes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def framework_comparison_chart(table: pd.DataFrame, path: Path, title: str) -> Path:
    """Grouped bars from ``compare_frameworks``: p50 latency and throughput per batch size,
    one bar per framework."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frameworks = list(dict.fromkeys(table["framework"]))
    batch_sizes = sorted(set(table["batch size"]))
    width = 0.8 / max(len(frameworks), 1)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, column in zip(axes, ("p50 (ms)", "throughput (inputs/s)"), strict=True):
        for offset, framework in enumerate(frameworks):
            mine = table[table["framework"] == framework].set_index("batch size")[column]
            values = [float(mine.get(size, float("nan"))) for size in batch_sizes]
            positions = [
                i + (offset - (len(frameworks) - 1) / 2) * width for i in range(len(batch_sizes))
            ]
            axis.bar(positions, values, width, label=framework)
        axis.set_xticks(range(len(batch_sizes)), [f"batch {size}" for size in batch_sizes])
        axis.set_ylabel(column)
        axis.grid(axis="y", alpha=0.3)
    axes[0].legend()
    figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=120)
    finally:  # pyplot keeps every open figure until it is closed, written or not
        plt.close(figure)
    return path
