"""A folder of JPEGs evaluated with ``--dataset`` against the same model on synthetic inputs.

Writes ``--images`` 224x224 JPEGs (seeded smooth patterns with noise, ten ImageNet class
folders) to a temporary folder, adds them with ``mlms datasets add``'s code path into a
temporary store, then alternates, in one process, ``evaluate`` of resnet18 (torch, CPU) on
synthetic inputs and on the data set, both at one batch size, the synthetic run as many
iterations as the data set has batches. The data set's throughput is samples over the pass's
wall time (decoding, preprocessing and any wait for them included); the synthetic one is what
its record says (batch size over the summed predict times), the stricter of the two
baselines. Resident memory is sampled every 20 ms during the data set's evaluation; the growth
is its peak over the resident size at the pass's first batch (and, printed beside it, over
the size before the evaluation, the model's load and first activations included).

Targets: throughput ratio >= 0.95, resident memory growth <= 300 MB.

    .venv/bin/python benchmarks/dataset_pipeline.py [--images 5000] [--batch 32] [--rounds 2]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
from PIL import Image

CLASSES = [
    "tench",
    "goldfish",
    "great white shark",
    "tiger shark",
    "hammerhead",
    "electric ray",
    "stingray",
    "cock",
    "hen",
    "ostrich",
]


def make_jpegs(folder: Path, count: int, seed: int = 0) -> int:
    """``count`` JPEGs of 224x224: a seeded 7x7 colour field scaled up smoothly, with noise.
    Returns their total size in bytes."""
    generator = np.random.default_rng(seed)
    total = 0
    for number in range(count):
        label = CLASSES[number % len(CLASSES)]
        (folder / label).mkdir(parents=True, exist_ok=True)
        field = generator.integers(0, 256, (7, 7, 3), dtype=np.uint8)
        picture = np.asarray(Image.fromarray(field).resize((224, 224), Image.Resampling.BICUBIC))
        noisy = picture.astype(np.int16) + generator.integers(-12, 13, picture.shape)
        path = folder / label / f"{number:05d}.jpg"
        Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(path, quality=90)
        total += path.stat().st_size
    return total


class PeakRss:
    """The process's peak resident memory while the block runs, sampled on a thread; and its
    resident size when ``mark`` is first called (the pass's first batch)."""

    def __init__(self, every: float = 0.02) -> None:
        self._process, self._every = psutil.Process(), every
        self._stop = threading.Event()
        self.before = self.peak = self.at_mark = 0

    def mark(self) -> None:
        if not self.at_mark:
            self.at_mark = self._process.memory_info().rss

    def __enter__(self) -> PeakRss:
        self.before = self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            self.peak = max(self.peak, self._process.memory_info().rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlms-dataset-bench-") as tmp:
        os.environ["MLMS_HOME"] = str(Path(tmp) / "home")
        run(Path(tmp), args.images, args.batch, args.rounds)


def run(tmp: Path, images: int, batch: int, rounds: int) -> None:
    from mlms.datasets.ingest import add_dataset
    from mlms.evaluation.progress import Progress
    from mlms.evaluation.record import EvaluationRequest
    from mlms.evaluation.runner import evaluate
    from mlms.store.factory import default_store

    started = time.perf_counter()
    size = make_jpegs(tmp / "jpegs", images)
    print(
        f"{images} JPEGs, {size / 1e6:.1f} MB ({size / images / 1e3:.1f} kB each), written in "
        f"{time.perf_counter() - started:.1f} s"
    )
    store = default_store()
    started = time.perf_counter()
    index, _sha = add_dataset(store, tmp / "jpegs", "jpegs")
    print(
        f"added: {index.samples} samples in {len(index.shards)} shards in "
        f"{time.perf_counter() - started:.1f} s"
    )
    common = {"model": "resnet18", "framework": "torch", "batch_sizes": [batch], "warmup": 3}
    synthetic = EvaluationRequest(**common, iterations=math.ceil(images / batch), min_seconds=0.0)
    from_dataset = EvaluationRequest(**common, iterations=1, min_seconds=0.0, dataset="jpegs")
    evaluate(synthetic.model_copy(update={"iterations": 3}), store=store)  # builds the asset
    print(f"cores: {os.cpu_count()}; resnet18, torch, CPU, batch {batch}")
    print("round  synthetic (img/s)  synthetic wall (img/s)  data set (img/s)  ratio  RSS growth")
    ratios, growths = [], []
    for number in range(1, rounds + 1):
        plain = evaluate(synthetic, store=store).results[0]
        with PeakRss() as rss:

            def progress(event: Progress, rss: PeakRss = rss) -> None:
                if event.run == "model":
                    rss.mark()

            record = evaluate(from_dataset, store=store, progress=progress)
        streamed = record.results[0]
        assert streamed.samples == images and record.accuracy.samples == images
        ratio = streamed.throughput / plain.throughput
        growth = (rss.peak - rss.at_mark) / 1e6
        ratios.append(ratio)
        growths.append(growth)
        wall = plain.batch_size * plain.iterations / plain.seconds
        print(
            f"{number:5d}  {plain.throughput:17.1f}  {wall:22.1f}  {streamed.throughput:16.1f}  "
            f"{ratio:5.3f}  {growth:7.1f} MB  (from before the evaluation, the model's load "
            f"included: {(rss.peak - rss.before) / 1e6:.1f} MB)"
        )
    print(
        f"throughput ratio (data set / synthetic), median of {rounds}: "
        f"{statistics.median(ratios):.3f} (target >= 0.95)"
    )
    print(
        f"resident memory growth over the data set's pass (peak less the size at its first "
        f"batch), largest: {max(growths):.1f} MB (target <= 300 MB)"
    )


if __name__ == "__main__":
    main()
