"""A COCO-format folder evaluated for mAP with ``--dataset`` against the same detector on
synthetic inputs, side by side in one process.

Writes ``--images`` JPEGs of 320 x 240 (filled rectangles of three COCO categories on a noisy
field, one to four an image, their boxes in an instances JSON as COCO ships it) to a temporary
folder, adds them with ``mlms datasets add``'s code path into a temporary store, then alternates
``evaluate`` of ssdlite320_mobilenet_v3 (torch, CPU) on synthetic inputs and on the data set, at
one batch size: a synthetic run before and after each pass over the data set (as many iterations
as the data set has batches, or ``--synthetic-iterations``), their mean the baseline, so that a
load that drifts on a shared machine moves both sides alike. The data set's
throughput is samples over the pass's wall time: decoding and preprocessing (the prefetching
stage), the predicts, the post-processing (box decoding, NMS) and the hand-over of each batch's
boxes to the scorer's thread included; pycocotools' COCOeval runs once after the pass, off the
measured path. The synthetic throughput is its record's (batch size over the summed predict
times), the stricter baseline. Beside it, the pass against its own predicts (batch size over
their mean latency, in the same run): what the pipeline around the model costs, free of any
change in the machine's load between runs. The detector's weights are seeded, so its mAP is
near zero: the number is printed to show it was computed on every image.

Target: throughput ratio >= 0.9.

    .venv/bin/python benchmarks/accuracy_coco_throughput.py [--images 5000] [--batch 16] \
        [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

#: COCO category ids and the colours their rectangles are drawn in.
CATEGORIES = {1: ("person", (230, 40, 40)), 3: ("car", (40, 210, 60)), 18: ("dog", (50, 70, 240))}


def make_coco(folder: Path, count: int, seed: int = 0) -> int:
    """``count`` JPEGs of 320 x 240 under ``folder/val`` and their instances JSON under
    ``folder/annotations``; returns the images' total size in bytes."""
    generator = np.random.default_rng(seed)
    (folder / "val").mkdir(parents=True)
    (folder / "annotations").mkdir()
    images, annotations, total = [], [], 0
    for image_id in range(1, count + 1):
        field = generator.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        picture = Image.fromarray(field).resize((320, 240), Image.Resampling.BICUBIC)
        pen = ImageDraw.Draw(picture)
        for _ in range(int(generator.integers(1, 5))):
            category = int(generator.choice(list(CATEGORIES)))
            w, h = int(generator.integers(20, 160)), int(generator.integers(20, 120))
            x, y = int(generator.integers(0, 320 - w)), int(generator.integers(0, 240 - h))
            pen.rectangle([x, y, x + w - 1, y + h - 1], fill=CATEGORIES[category][1])
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                 "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0}
            )  # fmt: skip
        path = folder / "val" / f"{image_id:05d}.jpg"
        picture.save(path, quality=90)
        total += path.stat().st_size
        images.append({"id": image_id, "file_name": path.name, "width": 320, "height": 240})
    categories = [{"id": i, "name": name} for i, (name, _) in CATEGORIES.items()]
    data = {"images": images, "annotations": annotations, "categories": categories}
    (folder / "annotations" / "instances_val.json").write_text(json.dumps(data))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--model", default="ssdlite320_mobilenet_v3")
    parser.add_argument(
        "--synthetic-iterations", type=int, default=None, help="Default: the data set's batches."
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlms-accuracy-bench-") as tmp:
        os.environ["MLMS_HOME"] = str(Path(tmp) / "home")
        iterations = args.synthetic_iterations or math.ceil(args.images / args.batch)
        run(Path(tmp), args.images, args.batch, args.rounds, args.model, iterations)


def run(tmp: Path, images: int, batch: int, rounds: int, model: str, iterations: int) -> None:
    from mlms.datasets.ingest import add_dataset
    from mlms.evaluation.record import EvaluationRequest
    from mlms.evaluation.runner import evaluate
    from mlms.store.factory import default_store

    started = time.perf_counter()
    size = make_coco(tmp / "coco", images)
    print(
        f"{images} JPEGs with COCO annotations, {size / 1e6:.1f} MB, written in "
        f"{time.perf_counter() - started:.1f} s"
    )
    store = default_store()
    started = time.perf_counter()
    index, _sha = add_dataset(store, tmp / "coco", "coco")
    print(
        f"added: {index.samples} samples ({index.task}) in {len(index.shards)} shards in "
        f"{time.perf_counter() - started:.1f} s"
    )
    common = {"model": model, "framework": "torch", "batch_sizes": [batch], "warmup": 2}
    synthetic = EvaluationRequest(**common, iterations=iterations, min_seconds=0.0)
    from_dataset = EvaluationRequest(**common, iterations=1, min_seconds=0.0, dataset="coco")
    evaluate(synthetic.model_copy(update={"iterations": 2}), store=store)  # builds the asset
    print(f"cores: {os.cpu_count()}; {model}, torch, CPU, batch {batch}")
    print(
        "round  synthetic before/after (img/s)  data set with mAP (img/s)  ratio  "
        "its own predicts (img/s)  ratio  mAP     mAP@.5  AR@100  after the pass (s)"
    )
    ratios, owns = [], []
    for number in range(1, rounds + 1):
        before = evaluate(synthetic, store=store).results[0].throughput
        began = time.perf_counter()
        record = evaluate(from_dataset, store=store)
        whole = time.perf_counter() - began
        after = evaluate(synthetic, store=store).results[0].throughput
        streamed, accuracy = record.results[0], record.accuracy
        assert streamed.samples == images and accuracy is not None and accuracy.samples == images
        ratio = streamed.throughput / statistics.mean([before, after])
        ratios.append(ratio)
        own = streamed.batch_size / (streamed.latency_ms.mean / 1e3)
        owns.append(streamed.throughput / own)
        metrics = accuracy.metrics
        print(
            f"{number:5d}  {before:15.2f} / {after:<15.2f}  {streamed.throughput:25.2f}  "
            f"{ratio:5.3f}  {own:24.2f}  {owns[-1]:5.3f}  "
            f"{metrics['map']:.4f}  {metrics['map_50']:.4f}  {metrics.get('ar_100', 0):.4f}  "
            f"{whole - streamed.seconds:.1f} (load, warm-up, COCOeval)"
        )
    print(
        f"throughput ratio (data set with mAP / synthetic), median of {rounds}: "
        f"{statistics.median(ratios):.3f} (target >= 0.9); against the pass's own predicts: "
        f"{statistics.median(owns):.3f}"
    )


if __name__ == "__main__":
    main()
