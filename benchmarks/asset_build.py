"""A model's assets built from nothing through ``AssetManager.ensure`` (the product's path), in
two orders side by side, each in a fresh local store: torch first and then another framework
(two builder processes, the second loading the weights the first wrote), and the other
framework first (one builder makes the torch weights and exports from the same module).

With ``--baseline TREE`` (a checkout's root holding another ``mlms/``, e.g. ``git archive REV
mlms | tar -x -C TREE``), it compares the two trees instead: the other framework first, each
build in a fresh interpreter of its tree, the trees alternating.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/asset_build.py --model gpt2_small \\
        [--framework onnxruntime] [--rounds 1] [--baseline TREE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _build(model: str, order: list[str]) -> list[float]:
    from mlms.assets.manager import AssetManager
    from mlms.catalog.zoo import get_model
    from mlms.store.local import LocalStore

    manifest = get_model(model)
    with tempfile.TemporaryDirectory() as tmp:
        manager = AssetManager(LocalStore(Path(tmp) / "store"), Path(tmp) / "cache")
        seconds = []
        for framework in order:
            began = time.perf_counter()
            manager.ensure(manifest, framework)
            seconds.append(time.perf_counter() - began)
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2_small")
    parser.add_argument("--framework", default="onnxruntime")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.once:  # one build in this interpreter, for --baseline
        print(sum(_build(args.model, [args.framework, "torch"])))
        return
    if args.baseline is not None:
        _compare_trees(args)
        return
    for round_ in range(1, args.rounds + 1):
        apart = _build(args.model, ["torch", args.framework])
        together = _build(args.model, [args.framework, "torch"])
        print(
            f"round {round_}: {args.model}, torch then {args.framework}: "
            f"{apart[0]:.1f} + {apart[1]:.1f} = {sum(apart):.1f} s; {args.framework} first "
            f"(one builder): {together[0]:.1f} + {together[1]:.1f} = {sum(together):.1f} s; "
            f"ratio {sum(together) / sum(apart):.3f}",
            flush=True,
        )


def _compare_trees(args: argparse.Namespace) -> None:
    trees = {"this tree": ROOT, "baseline": args.baseline.resolve()}
    seconds: dict[str, list[float]] = {name: [] for name in trees}
    command = [sys.executable, __file__, "--once", "--model", args.model,
               "--framework", args.framework]  # fmt: skip
    for round_ in range(args.rounds):
        for name in sorted(trees, reverse=bool(round_ % 2)):
            env = {**os.environ, "PYTHONPATH": str(trees[name])}
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            seconds[name].append(float(done.stdout.split()[-1]))
            print(f"round {round_ + 1}, {name}: {seconds[name][-1]:.1f} s", flush=True)
    mine, base = (min(seconds[name]) for name in trees)
    print(
        f"{args.model}, {args.framework} then torch, best of {args.rounds}: this tree "
        f"{mine:.1f} s, baseline {base:.1f} s, ratio {mine / base:.3f}"
    )


if __name__ == "__main__":
    main()
