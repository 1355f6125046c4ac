"""An evaluation's synthetic input pool made as before (one float64 draw of the whole pool, then
cast) and as ``mlms.evaluation.inputs.open_inputs`` makes it now (sample by sample into the
input's dtype), side by side in one run, the two pools checked identical.

Every evaluation on synthetic inputs makes its pool of 64 samples before it loads the model; for
the zoo's 800-pixel detectors that is 491 MB of float32 and, before, a float64 copy of twice
that. Both sides alternate ``--repeats`` times per model, each first in turn; medians.

    .venv/bin/python benchmarks/synthetic_inputs.py \
        [--models resnet50,deeplabv3_resnet50,retinanet_resnet50_fpn] [--repeats 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from mlms.catalog.zoo import get_model
from mlms.evaluation.inputs import open_inputs

POOL = 64  # open_inputs' default


def old_pool(shape: list[int], dtype: str, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((POOL, *shape)).astype(dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,deeplabv3_resnet50,retinanet_resnet50_fpn")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, numpy {np.__version__}; {POOL} samples; medians of "
          f"{args.repeats}")  # fmt: skip
    print("model                      sample        MB  old (s)  new (s)  old/new  identical")
    for name in args.models.split(","):
        manifest = get_model(name)
        spec = manifest.inputs[0]
        before = old_pool(spec.shape, spec.dtype, 0)
        now = open_inputs(manifest, ["synthetic"], seed=0).take(0, POOL).tensor
        same = now is not None and now.dtype == before.dtype and np.array_equal(before, now)
        del before, now
        seconds: dict[str, list[float]] = {"old": [], "new": []}
        for repeat in range(args.repeats):
            # Each side first in turn: the first of a pair can find freed memory to reuse.
            for side in ("old", "new") if repeat % 2 == 0 else ("new", "old"):
                started = time.perf_counter()
                if side == "old":
                    made = old_pool(spec.shape, spec.dtype, 0)
                else:
                    made = open_inputs(manifest, ["synthetic"], seed=0)
                seconds[side].append(time.perf_counter() - started)
                del made
        o, n = statistics.median(seconds["old"]), statistics.median(seconds["new"])
        megabytes = POOL * np.prod(spec.shape) * np.dtype(spec.dtype).itemsize / 1e6
        print(
            f"{name:25s}  {'x'.join(map(str, spec.shape)):11s}  {megabytes:6.0f}"
            f"  {o:7.2f}  {n:7.2f}  {o / n:7.2f}  {'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
