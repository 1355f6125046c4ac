"""Commands timed in fresh processes, side by side: each case run N times under this tree and,
with a baseline (a checkout's root holding another ``mlms/``), alternately under that one; the
minimum of the runs (the least disturbed on a shared machine) of the wall time and of user+sys
CPU (steadier than the wall under load), children included. Used by ``cli_startup.py`` and
``framework_start.py``."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_run(
    tree: Path, argv: list[str], home: Path, server: str | None = None
) -> tuple[float, float]:
    """(wall, CPU) seconds of ``python ARGV`` with ``tree``'s mlms (against ``server`` where
    given, else embedded)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MLMS_HOME": str(home)}
    env.pop("MLMS_SERVER", None)
    if server is not None:
        env["MLMS_SERVER"] = server
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the first run writes the .pyc files the others read
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, *argv],
        cwd=tree,  # python -m puts the working folder first on sys.path
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def compare(
    cases: dict[str, list[str]],
    runs: int,
    baseline: Path | None,
    servers: dict[str, str] | None = None,
) -> None:
    """Print a line per case: each tree's minimum wall and CPU, and their ratio. Every case
    runs once per tree first, outside the timing (bytecode files, assets built on first use),
    in one ``$MLMS_HOME`` shared by all runs; a case named in ``servers`` runs against that
    server's address."""
    servers = servers or {}
    trees = {"this tree": ROOT, **({"baseline": baseline} if baseline else {})}
    width = max(map(len, cases))
    with tempfile.TemporaryDirectory() as home:
        for case, argv in cases.items():
            server = servers.get(case)
            for tree in trees.values():
                timed_run(tree, argv, Path(home), server)
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for _ in range(runs):
                for name, tree in trees.items():
                    times[name].append(timed_run(tree, argv, Path(home), server))
            best = {name: min(w for w, _ in values) for name, values in times.items()}
            cpu = {name: min(c for _, c in values) for name, values in times.items()}
            line = "  ".join(
                f"{name} {seconds:.3f} s (CPU {cpu[name]:.3f} s)" for name, seconds in best.items()
            )
            if baseline:
                line += f"  this tree / baseline: {best['this tree'] / best['baseline']:.3f}"
            print(f"{case:{width}}  min of {runs}: {line}", flush=True)
