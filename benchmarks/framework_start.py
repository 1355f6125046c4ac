"""Framework start-up: what a process that runs TensorFlow or Keras on JAX pays before its first
predict. Each run is a fresh interpreter calling the product's import path, timed from the
outside (wall, and user+sys CPU); the minimum of N runs a case. With ``--baseline TREE`` (a
checkout's root holding another ``mlms/``) the two trees alternate and the ratio is printed.

Cases: ``tensorflow`` (``mlms.zoo.keras_models.import_tensorflow``, which every agent, builder
and signature reader of TensorFlow calls), ``jax`` (``mlms.predictors.jax_predictor.
import_keras``, the jax agent's), and ``eval-torch``, ``eval-tensorflow`` (a whole embedded
``mlms eval -m digits_cnn -f FRAMEWORK -n 2``: the CLI, for TensorFlow its child agent, the
predicts and the accuracy on the held-out split; the asset is built first, outside the timed
runs).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/framework_start.py --runs 5 [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "tensorflow": [
        "-c",
        "from mlms.zoo.keras_models import import_tensorflow; import_tensorflow()",
    ],
    "jax": ["-c", "from mlms.predictors.jax_predictor import import_keras; import_keras()"],
    **{
        f"eval-{framework}": shlex.split(
            f"-m mlms eval -m digits_cnn -f {framework} -n 2 --warmup 0 --min-seconds 0"
        )
        for framework in ("torch", "tensorflow")
    },
}


def run(tree: Path, args: list[str], home: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run, its children's CPU included."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MLMS_HOME": str(home)}
    env.pop("MLMS_SERVER", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the first run writes the .pyc files the others read
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, *args],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES)
    )
    args = parser.parse_args()
    trees = {"this tree": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    with tempfile.TemporaryDirectory() as home:
        for case in args.cases.split(","):
            for tree in trees.values():  # .pyc files, and the eval's asset, outside the timing
                run(tree, CASES[case], Path(home))
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for _ in range(args.runs):
                for name, tree in trees.items():
                    times[name].append(run(tree, CASES[case], Path(home)))
            best = {name: min(w for w, _ in values) for name, values in times.items()}
            cpu = {name: min(c for _, c in values) for name, values in times.items()}
            line = "  ".join(
                f"{name} {seconds:.2f} s (CPU {cpu[name]:.2f} s)" for name, seconds in best.items()
            )
            if args.baseline:
                line += f"  this tree / baseline: {best['this tree'] / best['baseline']:.3f}"
            print(f"{case:10} min of {args.runs}: {line}", flush=True)


if __name__ == "__main__":
    main()
