"""Each task's metric through mlms (``mlms.accuracy``) against its reference library run by hand
on the same outputs, side by side: the largest absolute difference per task.

Seeded data, made here: COCO ground truth of ``--images`` images (one to six boxes of three
categories) with detections that move, miss and add boxes, scored by mlms's ``CocoDetection``
(results as arrays, through its scoring thread) and by pycocotools' COCOeval on the same results
as COCO's JSON objects; ``--masks`` class masks of 128 x 128 (21 classes, 255 borders) and
predictions that shift some of them, by mlms's ``MaskScores`` in batches of 4 and by torchmetrics'
functional mIoU and pixel accuracy on the whole stack; token sequences with random logits, by
mlms's ``Perplexity`` in rows of 4 and torchmetrics' functional perplexity; ``--sentences`` noisy
hypotheses of reference sentences, by mlms and by sacrebleu's corpus BLEU and chrF. Target: every
difference <= 1e-6.

    .venv/bin/python benchmarks/accuracy_reference_check.py [--images 500] [--masks 32] \\
        [--sentences 300]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json

import numpy as np
import torch

CATEGORIES = {1: "person", 3: "car", 18: "dog"}
WORDS = ["the", "a", "cat", "dog", "house", "tree", "runs", "sat", "on", "under", "red", "old"]


def detection(images: int, generator: np.random.Generator) -> list[tuple[str, float, float]]:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from mlms.accuracy.detection import STATS, CocoDetection
    from mlms.catalog.zoo import get_model
    from mlms.datasets.truth import ImageTruth
    from mlms.manifest import Preprocessing
    from mlms.tasks.postprocess import Detections

    found, annotations, results, truths, answers = [], [], [], [], []
    for image_id in range(1, images + 1):
        found.append({"id": image_id, "width": 320, "height": 240})
        mine, boxes, scores, labels = [], [], [], []
        for _ in range(int(generator.integers(1, 7))):
            w, h = generator.uniform(8, 120), generator.uniform(8, 100)
            x, y = generator.uniform(0, 320 - w), generator.uniform(0, 240 - h)
            category = int(generator.choice(list(CATEGORIES)))
            mine.append(
                {
                    "id": len(annotations) + len(mine) + 1,
                    "image_id": image_id,
                    "category_id": category,
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
            if generator.random() < 0.8:
                moved = np.array([x, y, x + w, y + h]) + generator.normal(0, 5, 4)
                boxes.append(moved)
                scores.append(generator.random())
                labels.append(category)
        boxes.append([10.0, 10.0, 60.0, 40.0])
        scores.append(generator.random())
        labels.append(3)
        annotations.extend(mine)
        truths.append(ImageTruth(image_id, 320, 240, json.dumps(mine)))
        corners = np.array(boxes, np.float32)
        corners[:, 2:] = np.maximum(corners[:, 2:], corners[:, :2] + 1)
        answers.append(Detections(corners, np.array(scores, np.float32), np.array(labels)))
        # The same boxes as COCO results: clipped to the image, as every detector's are.
        clipped = np.clip(corners.astype(np.float64), 0, [320, 240, 320, 240])
        for box, score, label in zip(clipped, scores, labels, strict=True):
            results.append(
                {
                    "image_id": image_id,
                    "category_id": int(label),
                    "score": float(np.float32(score)),
                    "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]],
                }
            )
    manifest = get_model("ssdlite320_mobilenet_v3")
    identity = manifest.inputs[0].model_copy(update={"preprocessing": Preprocessing()})
    scorer = CocoDetection(manifest.model_copy(update={"inputs": [identity]}), CATEGORIES)
    for start in range(0, images, 16):
        scorer.submit(answers[start : start + 16], truths[start : start + 16], 16)
    ours = scorer.finish()
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = {
            "images": found,
            "annotations": annotations,
            "categories": [{"id": i, "name": n} for i, n in CATEGORIES.items()],
        }
        truth.createIndex()
        evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    theirs = dict(zip(STATS, (float(v) for v in evaluation.stats), strict=True))
    return [
        (f"detection {k}", ours[k], theirs[k]) for k in ("map", "map_50", "map_75", "ar_100")
    ] + [
        (
            "detection, all 12 stats (largest |diff|)",
            0.0,
            max(abs(ours[k] - theirs[k]) for k in ours),
        )
    ]


def segmentation(count: int, generator: np.random.Generator) -> list[tuple[str, float, float]]:
    from torchmetrics.functional.classification import multiclass_accuracy, multiclass_jaccard_index

    from mlms.accuracy.segmentation import MaskScores
    from mlms.catalog.zoo import get_model

    truth = np.zeros((count, 128, 128), np.uint8)
    for mask in truth:
        for _ in range(6):
            top, left = generator.integers(0, 100, 2)
            mask[top : top + 28, left : left + 28] = generator.integers(1, 21)
            mask[top, left : left + 28] = 255
    predicted = truth.copy()
    predicted[predicted == 255] = 0
    predicted[: count // 2] = np.roll(predicted[: count // 2], 7, axis=2)
    scorer = MaskScores(get_model("lraspp_mobilenet_v3"), 21)
    for start in range(0, count, 4):
        rows = slice(start, start + 4)
        scorer.submit(torch.from_numpy(predicted[rows]).long(), truth[rows], 4)
    ours = scorer.finish()
    preds, target = torch.from_numpy(predicted).long(), torch.from_numpy(truth).long()
    miou = multiclass_jaccard_index(preds, target, 21, average="macro", ignore_index=255)
    pixels = multiclass_accuracy(preds, target, 21, average="micro", ignore_index=255)
    return [
        ("segmentation mIoU", ours["miou"], float(miou)),
        ("segmentation pixel accuracy", ours["pixel_accuracy"], float(pixels)),
    ]


class _Logits:
    framework = "check"

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits

    def sequence_logits(self, batch: np.ndarray) -> np.ndarray:
        return self.logits[batch[:, 0]]


def perplexity(generator: np.random.Generator) -> list[tuple[str, float, float]]:
    from torchmetrics.functional.text import perplexity as reference

    from mlms.accuracy.language import IGNORED, Perplexity, targets

    rows, positions, vocabulary = 24, 32, 500
    tokens = generator.integers(0, vocabulary, (rows, positions))
    tokens[:, 0] = np.arange(rows)
    lengths = generator.integers(4, positions + 1, rows)
    logits = generator.normal(0, 2, (rows, positions, vocabulary)).astype(np.float32)
    scorer = Perplexity(_Logits(logits))
    scorer.submit(None, (tokens, lengths), rows)
    ours = scorer.finish()["perplexity"]
    theirs = reference(
        torch.from_numpy(logits[:, :-1]), torch.from_numpy(targets(tokens, lengths)), IGNORED
    )
    return [("perplexity", ours, float(theirs))]


def translation(sentences: int, generator: np.random.Generator) -> list[tuple[str, float, float]]:
    import sacrebleu

    from mlms.accuracy.translation import translation_metrics

    references = [
        " ".join(generator.choice(WORDS, generator.integers(4, 14))) for _ in range(sentences)
    ]
    hypotheses = []
    for sentence in references:
        words = sentence.split()
        kept = [w if generator.random() > 0.25 else str(generator.choice(WORDS)) for w in words]
        hypotheses.append(" ".join(kept[: max(1, len(kept) - int(generator.integers(0, 3)))]))
    ours = translation_metrics(hypotheses, references)
    return [
        ("BLEU", ours["bleu"], sacrebleu.corpus_bleu(hypotheses, [references]).score),
        ("chrF", ours["chrf"], sacrebleu.corpus_chrf(hypotheses, [references]).score),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--masks", type=int, default=32)
    parser.add_argument("--sentences", type=int, default=300)
    args = parser.parse_args()
    generator = np.random.default_rng(0)
    rows = [
        *detection(args.images, generator),
        *segmentation(args.masks, generator),
        *perplexity(generator),
        *translation(args.sentences, generator),
    ]
    print(f"{'metric':42s} {'mlms':>14s} {'reference':>14s} {'|diff|':>10s}")
    for name, ours, theirs in rows:
        if name.startswith("detection, all"):
            print(f"{name:42s} {'':>14s} {'':>14s} {theirs:10.1e}")
        else:
            print(f"{name:42s} {ours:14.8f} {theirs:14.8f} {abs(ours - theirs):10.1e}")
    worst = max(t if n.startswith("detection, all") else abs(o - t) for n, o, t in rows)
    print(f"largest difference: {worst:.1e} (target <= 1e-6)")


if __name__ == "__main__":
    main()
