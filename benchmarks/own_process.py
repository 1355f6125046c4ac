"""Work in a process of its own (``mlms.isolation.call_in_own_process``): children forked from
the preloaded fork server, the product's path, against fresh interpreters started by
multiprocessing's spawn, side by side. Each round starts one fresh process per mode, which
builds the same model assets (``AssetManager.ensure``, every framework its own builder) into a
fresh store; the modes alternate, and their order flips each round.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/own_process.py \\
        [--models digits_cnn,resnet18,mobilenet_v2] [--frameworks torch,onnxruntime] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("forkserver", "spawn")


def _build_all(mode: str, models: list[str], frameworks: list[str]) -> float:
    """In this process: every asset built, in ``mode``; the seconds it took."""
    import mlms.isolation as isolation
    from mlms.assets.manager import AssetManager
    from mlms.catalog.zoo import get_model
    from mlms.store.local import LocalStore

    if mode == "spawn":
        isolation._context = lambda: multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        manager = AssetManager(LocalStore(Path(tmp) / "store"), Path(tmp) / "cache")
        began = time.perf_counter()
        for model in models:
            for framework in frameworks:
                manager.ensure(get_model(model), framework)
        return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits_cnn,resnet18,mobilenet_v2")
    parser.add_argument("--frameworks", default="torch,onnxruntime")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    models, frameworks = args.models.split(","), args.frameworks.split(",")
    if args.child:
        print(json.dumps(_build_all(args.child, models, frameworks)))
        return
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_ in range(args.rounds):
        for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
            command = [sys.executable, __file__, "--child", mode, "--models", args.models,
                       "--frameworks", args.frameworks]  # fmt: skip
            began = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            total = time.perf_counter() - began
            seconds = json.loads(done.stdout.strip().splitlines()[-1])
            walls[mode].append(seconds)
            print(f"round {round_ + 1} {mode:10s} builds {seconds:6.2f} s "
                  f"(process {total:6.2f} s)", flush=True)  # fmt: skip
    fork, spawn = (statistics.median(walls[m]) for m in MODES)
    print(f"median build time, {len(models) * len(frameworks)} assets: forkserver {fork:.2f} s, "
          f"spawn {spawn:.2f} s, forkserver/spawn {fork / spawn:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
