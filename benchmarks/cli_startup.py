"""CLI start-up: the wall time of ``mlms --help``, ``mlms models`` and ``mlms evals`` in fresh
processes, the minimum of N runs each (the machine is shared: the minimum is the least
disturbed run), and their CPU time (user+sys; steadier than the wall on a loaded machine).
With ``--baseline TREE`` (a checkout's root holding another ``mlms/``), the two trees run
alternately, side by side, and the ratio is printed.

    .venv/bin/python benchmarks/cli_startup.py --runs 7 [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (["--help"], ["models"], ["evals"])


def wall(tree: Path, args: list[str], home: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MLMS_HOME": str(home)}
    env.pop("MLMS_SERVER", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the first run writes the .pyc files the others read
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        cwd=tree,  # python -m puts the working folder first on sys.path
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    trees = {"this tree": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    with tempfile.TemporaryDirectory() as home:
        for command in COMMANDS:
            for tree in trees.values():  # compile the .pyc files outside the timed runs
                wall(tree, command, Path(home))
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for _ in range(args.runs):
                for name, tree in trees.items():
                    times[name].append(wall(tree, command, Path(home)))
            best = {name: min(w for w, _ in values) for name, values in times.items()}
            cpu = {name: min(c for _, c in values) for name, values in times.items()}
            line = "  ".join(
                f"{name} {seconds:.3f} s (CPU {cpu[name]:.3f} s)" for name, seconds in best.items()
            )
            if args.baseline:
                line += f"  (baseline / this tree: {best['baseline'] / best['this tree']:.1f}x)"
            print(f"mlms {' '.join(command):7} min of {args.runs}: {line}", flush=True)


if __name__ == "__main__":
    main()
