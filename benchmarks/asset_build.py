"""A model's assets built from nothing through ``AssetManager.ensure`` (the product's path), in
two orders side by side, each in a fresh local store: torch first and then another framework
(two builder processes, the second loading the weights the first wrote), and the other
framework first (one builder makes the torch weights and exports from the same module).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/asset_build.py --model gpt2_small \\
        [--framework onnxruntime] [--rounds 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def _build(model: str, order: list[str]) -> list[float]:
    from mlms.store.local import LocalStore
    from mlms.zoo.assets import AssetManager
    from mlms.zoo.catalog import get_model

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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
