"""A segmenter's post-processing before and after its argmax step became max's indices, side by
side in one run, with the answers checked identical.

The zoo sweep's heavy cells on an H200 spent most of each segmentation evaluation here:
deeplabv3_resnet50 at batch 64 predicted in 738 ms and post-processed in 2,946 ms, 2,692 of them
in the "argmax" step (``mlms.tasks.postprocess.class_map``: torch's CPU ``argmax`` over the
class dimension of the logits upsampled to 64 x 21 x 520 x 520, which runs on one thread).

For each batch size, class logits of the model's output shape (its network run on the meta
device: 21 x 65 x 65 for a 520-pixel DeepLabV3) go through, alternately, ``--repeats`` times:

- old: the post-processing as it was (upsampling, ``argmax(dim=1)``, the classes' pixel counts
  and the top k), copied here;
- new: the product's ``mlms.tasks.postprocess.postprocess``, each step timed by its ``step``
  hook (as an evaluation's spans time it).

The "argmax" columns are the step alone (old: ``argmax`` of the same upsampled map), the
"postprocess" columns the whole stage; medians. Both sides' class maps and answers are
compared on these logits and on logits of three values only, where most pixels tie.

    .venv/bin/python benchmarks/segmentation_postprocess.py [--model deeplabv3_resnet50] \
        [-b 1,16,64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator

import numpy as np
import torch

from mlms.assets.architectures import architecture_of
from mlms.catalog.zoo import get_model
from mlms.manifest import ModelManifest
from mlms.tasks.postprocess import class_map, postprocess

K = 5


def old_class_map(logits: np.ndarray, size: tuple[int, int]) -> tuple[torch.Tensor, float]:
    """The class map as the argmax step made it before; the seconds of that step."""
    full = torch.nn.functional.interpolate(
        torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float32)),
        size=size,
        mode="bilinear",
        align_corners=False,
    )
    started = time.perf_counter()
    classes = full.argmax(dim=1)
    return classes, time.perf_counter() - started


def old_postprocess(logits: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The segmentation answer as it was made before: the k classes covering most pixels."""
    classes, _ = old_class_map(logits, size)
    counts = torch.stack([torch.bincount(c.flatten(), minlength=logits.shape[1]) for c in classes])
    shares = (counts.float() / classes[0].numel()).numpy()
    k = min(K, shares.shape[1])
    order = np.argsort(-shares, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(shares, order, axis=1)


class StepClock:
    """A ``step`` hook that adds up each named step's seconds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started


def output_shape(manifest: ModelManifest) -> tuple[int, ...]:
    """The network's logits for one input, from a run on the meta device."""
    with torch.device("meta"):
        network = architecture_of(manifest, initialise=False).eval()
        return tuple(network(torch.empty(1, *manifest.inputs[0].shape)).shape[1:])


def identical(manifest: ModelManifest, logits: np.ndarray, size: tuple[int, int]) -> bool:
    old_map, _ = old_class_map(logits, size)
    old_answer = old_postprocess(logits, size)
    new_answer = postprocess(manifest, logits, K)
    return (
        torch.equal(old_map, class_map(manifest, logits))
        and np.array_equal(old_answer[0], new_answer[0])
        and np.array_equal(old_answer[1], new_answer[1])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deeplabv3_resnet50")
    parser.add_argument("-b", "--batch-sizes", default="1,16,64")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    manifest = get_model(args.model)
    size = tuple(manifest.inputs[0].shape[-2:])
    shape = output_shape(manifest)
    print(
        f"{args.model}: logits {'x'.join(map(str, shape))} upsampled to {size[0]} x {size[1]}; "
        f"{os.cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} "
        f"threads; medians of {args.repeats}"
    )
    print(
        "batch  argmax old (ms)  new (ms)  old/new  postprocess old (ms)  new (ms)  old/new  "
        "identical"
    )
    generator = np.random.default_rng(0)
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        logits = generator.standard_normal((batch, *shape)).astype(np.float32)
        tied = generator.integers(0, 3, (batch, *shape)).astype(np.float32)
        same = identical(manifest, logits, size) and identical(manifest, tied, size)
        postprocess(manifest, logits[:1], K)  # first-call costs out of the timings
        old_step, new_step, old_stage, new_stage = [], [], [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            old_postprocess(logits, size)
            old_stage.append(time.perf_counter() - started)
            old_step.append(old_class_map(logits, size)[1])
            clock = StepClock()
            started = time.perf_counter()
            postprocess(manifest, logits, K, clock)
            new_stage.append(time.perf_counter() - started)
            new_step.append(clock.seconds["argmax"])
        a_old, a_new = statistics.median(old_step) * 1e3, statistics.median(new_step) * 1e3
        p_old, p_new = statistics.median(old_stage) * 1e3, statistics.median(new_stage) * 1e3
        print(
            f"{batch:5d}  {a_old:15.1f}  {a_new:8.1f}  {a_old / a_new:7.1f}  {p_old:20.1f}  "
            f"{p_new:8.1f}  {p_old / p_new:7.1f}  {'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
