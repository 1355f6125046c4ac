"""Each task's metric through mlms (``mlms.accuracy``) equals its reference library run by hand
on the same outputs, and is what it must be where the truth is known: the ground truth fed back
as detections gives mAP 1.0, the true masks mIoU 1.0, the references BLEU 100, uniform logits a
perplexity of the vocabulary's size."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest
import torch

from mlms.accuracy.detection import CocoDetection, coco_metrics, image_boxes
from mlms.accuracy.language import IGNORED, Perplexity, targets
from mlms.accuracy.segmentation import MaskScores
from mlms.accuracy.translation import translation_metrics
from mlms.catalog.zoo import get_model
from mlms.datasets.truth import ImageTruth
from mlms.errors import InvalidArgument
from mlms.manifest import Preprocessing
from mlms.tasks.postprocess import Detections

CATEGORIES = {1: "person", 3: "car", 18: "dog"}


def _scene(generator: np.random.Generator, images: int) -> dict:
    """COCO ground truth of ``images`` 200 x 160 images with one to four boxes each."""
    found, annotations = [], []
    for image_id in range(1, images + 1):
        found.append({"id": image_id, "width": 200, "height": 160, "file_name": f"{image_id}.png"})
        for _ in range(generator.integers(1, 5)):
            x, y = generator.uniform(0, 120), generator.uniform(0, 90)
            w, h = generator.uniform(8, 80), generator.uniform(8, 70)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": int(generator.choice(list(CATEGORIES))),
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    categories = [{"id": i, "name": n} for i, n in CATEGORIES.items()]
    return {"images": found, "annotations": annotations, "categories": categories}


def _pycocotools_by_hand(dataset: dict, results: list[dict]) -> list[float]:
    """The COCO team's own recipe: a ground-truth file, a results file, COCOeval."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = json.loads(json.dumps(dataset))
        truth.createIndex()
        evaluation = COCOeval(truth, truth.loadRes(json.loads(json.dumps(results))), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return [float(v) for v in evaluation.stats]


def _noisy_detections(dataset: dict, generator: np.random.Generator) -> list[dict]:
    """Each true box moved a little, some missed, some false ones added, scored at random."""
    results = []
    for annotation in dataset["annotations"]:
        if generator.random() < 0.2:
            continue
        box = np.array(annotation["bbox"]) + generator.normal(0, 4, 4)
        box[2:] = np.maximum(box[2:], 1)
        results.append(
            {
                "image_id": annotation["image_id"],
                "category_id": annotation["category_id"],
                "bbox": box.tolist(),
                "score": float(generator.random()),
            }
        )
    for image in dataset["images"]:
        results.append(
            {
                "image_id": image["id"],
                "category_id": 3,
                "bbox": [10.0, 10.0, 30.0, 20.0],
                "score": float(generator.random()),
            }
        )
    return results


def _rows(results: list[dict]) -> np.ndarray:
    return np.array(
        [[r["image_id"], *r["bbox"], r["score"], r["category_id"]] for r in results], np.float64
    )


def test_coco_map_equals_pycocotools_run_by_hand() -> None:
    generator = np.random.default_rng(0)
    dataset = _scene(generator, 12)
    results = _noisy_detections(dataset, generator)
    ours = coco_metrics(dataset, _rows(results))
    theirs = _pycocotools_by_hand(dataset, results)
    assert 0.05 < ours["map"] < 0.95
    assert list(ours.values()) == pytest.approx([v for v in theirs if v >= 0], abs=1e-6), (
        "every stat COCO reports"
    )
    assert (ours["map"], ours["map_50"], ours["ar_100"]) == pytest.approx(
        (theirs[0], theirs[1], theirs[8]), abs=1e-6
    )


def test_the_ground_truth_as_detections_scores_map_one() -> None:
    dataset = _scene(np.random.default_rng(1), 8)
    results = [
        {
            "image_id": a["image_id"],
            "category_id": a["category_id"],
            "bbox": a["bbox"],
            "score": 1.0,
        }
        for a in dataset["annotations"]
    ]
    metrics = coco_metrics(dataset, _rows(results))
    assert metrics["map"] == pytest.approx(1.0) and metrics["map_50"] == pytest.approx(1.0)
    assert metrics["ar_100"] == pytest.approx(1.0)
    assert coco_metrics(dataset, np.empty((0, 7)))["map"] == 0.0


def test_the_detection_scorer_maps_boxes_back_through_the_resize_and_crop() -> None:
    """A 200 x 160 image resized to a shorter side of 80 and centre-cropped to 80 x 80 (left
    offset 10 at that size): the true boxes as the model sees them come back as the truth and
    score mAP 1.0 through the scorer's own thread."""
    steps = Preprocessing(resize=80, crop=80)
    box = np.array([[60.0, 40.0, 100.0, 120.0]])  # x, y, w, h in the image
    seen = np.array([[(60 / 2) - 10, 40 / 2, (160 / 2) - 10, 160 / 2]])
    assert image_boxes(seen, steps, 200, 160) == pytest.approx(box)
    manifest = get_model("ssdlite320_mobilenet_v3")
    manifest = manifest.model_copy(
        update={"inputs": [manifest.inputs[0].model_copy(update={"preprocessing": steps})]}
    )
    scorer = CocoDetection(manifest, CATEGORIES)
    annotation = {"id": 1, "image_id": 7, "category_id": 18, "bbox": box[0].tolist(),
                  "area": 3200.0, "iscrowd": 0}  # fmt: skip
    truth = [ImageTruth(7, 200, 160, json.dumps([annotation]))]
    found = [Detections(seen.astype(np.float32), np.array([0.9], np.float32), np.array([18]))]
    scorer.submit(found, truth, 1)
    metrics = scorer.finish()
    assert scorer.samples == 1 and metrics["map"] == pytest.approx(1.0)


def _masks(generator: np.random.Generator, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Drawn rectangles of random classes on 4 masks of 48 x 64, a border of ignored pixels
    around each; the predictions a copy with some rectangles shifted."""
    truth = np.zeros((4, 48, 64), np.uint8)
    for mask in truth:
        for _ in range(3):
            top, left = generator.integers(0, 30), generator.integers(0, 40)
            mask[top : top + 15, left : left + 20] = generator.integers(1, classes)
            mask[top, left : left + 20] = 255
    predicted = truth.copy()
    predicted[predicted == 255] = 0
    predicted[:2] = np.roll(predicted[:2], 5, axis=2)
    return truth, predicted


def test_miou_and_pixel_accuracy_equal_torchmetrics_run_by_hand() -> None:
    from torchmetrics.functional.classification import multiclass_accuracy, multiclass_jaccard_index

    classes = 6
    truth, predicted = _masks(np.random.default_rng(2), classes)
    scorer = MaskScores(get_model("lraspp_mobilenet_v3"), classes)
    for rows in (slice(0, 3), slice(3, 4)):
        scorer.submit(torch.from_numpy(predicted[rows]).long(), truth[rows], len(truth[rows]))
    ours = scorer.finish()
    preds, target = torch.from_numpy(predicted).long(), torch.from_numpy(truth).long()
    miou = multiclass_jaccard_index(preds, target, classes, average="macro", ignore_index=255)
    pixels = multiclass_accuracy(preds, target, classes, average="micro", ignore_index=255)
    assert ours["miou"] == pytest.approx(float(miou), abs=1e-6) and ours["miou"] < 1
    assert ours["pixel_accuracy"] == pytest.approx(float(pixels), abs=1e-6)
    perfect = MaskScores(get_model("lraspp_mobilenet_v3"), classes)
    perfect.submit(torch.from_numpy(np.where(truth == 255, 0, truth)).long(), truth, 4)
    assert perfect.finish() == {"miou": pytest.approx(1.0), "pixel_accuracy": pytest.approx(1.0)}


def test_bleu_and_chrf_equal_sacrebleu_run_by_hand() -> None:
    import sacrebleu

    references = ["the cat sat on the mat", "a dog ran in the park today", "it is raining"]
    hypotheses = ["the cat sat on a mat", "a dog runs in the park", "it rains"]
    ours = translation_metrics(hypotheses, references)
    assert ours["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert ours["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    assert 0 < ours["bleu"] < 100
    assert translation_metrics(references, references)["bleu"] == pytest.approx(100.0)


class _Logits:
    """A language model whose logits are given: ``sequence_logits`` of the rows asked."""

    framework = "test"

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits

    def sequence_logits(self, batch: np.ndarray) -> np.ndarray:
        return self.logits[batch[:, 0]]


def test_perplexity_equals_torchmetrics_run_by_hand_and_skips_padding() -> None:
    """Six sequences of eight tokens of a vocabulary of 11 (the first token of each row names
    the row, so the fake model finds its logits); two are padded after 5 and 3 tokens."""
    from torchmetrics.functional.text import perplexity

    generator = np.random.default_rng(4)
    tokens = generator.integers(0, 11, size=(6, 8))
    tokens[:, 0] = np.arange(6)
    lengths = np.array([8, 8, 5, 8, 3, 8])
    logits = generator.normal(size=(6, 8, 11)).astype(np.float32)
    scorer = Perplexity(_Logits(logits))
    scorer.submit(None, (tokens[:4], lengths[:4]), 4)
    scorer.submit(None, (tokens[4:], lengths[4:]), 2)
    ours = scorer.finish()["perplexity"]
    target = targets(tokens, lengths)
    assert (target == IGNORED).sum() == 3 + 5
    theirs = perplexity(torch.from_numpy(logits[:, :-1]), torch.from_numpy(target), IGNORED)
    assert ours == pytest.approx(float(theirs), rel=1e-6)
    uniform = Perplexity(_Logits(np.zeros((6, 8, 11), np.float32)))
    uniform.submit(None, (tokens, lengths), 6)
    assert uniform.finish()["perplexity"] == pytest.approx(11.0, rel=1e-5)
    assert not math.isnan(ours)


def test_a_predictor_without_token_logits_is_one_line() -> None:
    class Plain:
        framework = "onnxruntime"

    with pytest.raises(InvalidArgument, match=r"onnxruntime cannot score.*--framework torch"):
        Perplexity(Plain())


def test_the_accuracy_guard_counts_points_of_each_task_headline() -> None:
    """advise's --max-accuracy-drop reads points of the task's metric: mAP and top-1 in
    hundredths, BLEU in its own points, perplexity as percent more than the baseline's."""
    from mlms.evaluation.record import Accuracy

    def accuracy(task: str, **metrics: float) -> Accuracy:
        return Accuracy(task=task, metrics=metrics, samples=10, dataset="d", **(
            {"top1": metrics["top1"]} if "top1" in metrics else {}))  # fmt: skip

    assert accuracy("detection", map=0.400).drop_from(accuracy("detection", map=0.412)) == (
        pytest.approx(1.2)
    )
    assert accuracy("translation", bleu=30.0).drop_from(accuracy("translation", bleu=31.5)) == (
        pytest.approx(1.5)
    )
    worse = accuracy("language_modeling", perplexity=22.0)
    assert worse.drop_from(accuracy("language_modeling", perplexity=20.0)) == pytest.approx(10.0)
    assert not worse.higher_is_better
    top = accuracy("classification", top1=0.97)
    assert top.drop_from(accuracy("classification", top1=0.98)) == pytest.approx(1.0)
    assert accuracy("detection", map=0.4, map_50=0.6).line() == "mAP@[.5:.95] 0.4000, map_50 0.6000"
    assert accuracy("detection").drop_from(accuracy("detection", map=0.4)) is None


def test_instance_masks_equal_pycocotools_segm_and_the_truth_scores_one() -> None:
    """Mask R-CNN's answer shape (boxes and masks over the model input's pixels) through the
    scorer: masks that are the truth (rectangles at even pixels, seen at half size and cropped
    10 pixels from the left) give mask mAP 1.0; shifted ones equal COCOeval's segm run by hand
    on the same RLEs."""
    from pycocotools import mask as rle

    steps = Preprocessing(resize=80, crop=80)  # 200 x 160 -> 100 x 80 -> crop 80 x 80 at x 10
    manifest = get_model("maskrcnn_resnet50_fpn")
    manifest = manifest.model_copy(
        update={"inputs": [manifest.inputs[0].model_copy(update={"preprocessing": steps})]}
    )
    boxes = [(40, 20, 60, 80), (120, 60, 40, 60)]  # x, y, w, h in the 200 x 160 image
    annotations = [
        {"id": n + 1, "image_id": 3, "category_id": 18, "bbox": [float(v) for v in box],
         "area": float(box[2] * box[3]), "iscrowd": 0,
         "segmentation": [[box[0], box[1], box[0] + box[2], box[1], box[0] + box[2],
                           box[1] + box[3], box[0], box[1] + box[3]]]}
        for n, box in enumerate(boxes)
    ]  # fmt: skip
    truth = [ImageTruth(3, 200, 160, json.dumps(annotations))]

    def seen(shift: int) -> Detections:
        masks = np.zeros((2, 80, 80), bool)
        corners = []
        for index, (x, y, w, h) in enumerate(boxes):
            left, top = x // 2 - 10 + shift, y // 2
            masks[index, top : top + h // 2, left : left + w // 2] = True
            corners.append([left, top, left + w // 2, top + h // 2])
        return Detections(
            np.array(corners, np.float32), np.array([0.9, 0.8], np.float32),
            np.array([18, 18]), masks,
        )  # fmt: skip

    exact = CocoDetection(manifest, CATEGORIES)
    exact.submit([seen(0)], truth, 1)
    metrics = exact.finish()
    assert metrics["mask_map"] == pytest.approx(1.0) and metrics["map"] == pytest.approx(1.0)
    shifted = CocoDetection(manifest, CATEGORIES)
    shifted.submit([seen(3)], truth, 1)
    ours = shifted.finish()
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    results = []
    for mask, score in zip(seen(3).masks, (0.9, 0.8), strict=True):
        full = np.zeros((160, 200), np.uint8)
        full[:, 20:180] = np.repeat(np.repeat(mask, 2, axis=0), 2, axis=1)
        results.append({"image_id": 3, "category_id": 18, "score": score,
                        "segmentation": rle.encode(np.asfortranarray(full))})  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        categories = [{"id": i, "name": n} for i, n in CATEGORIES.items()]
        gt.dataset = {"images": [{"id": 3, "width": 200, "height": 160}],
                      "annotations": annotations, "categories": categories}  # fmt: skip
        gt.createIndex()
        evaluation = COCOeval(gt, gt.loadRes(results), "segm")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    assert 0 < ours["mask_map"] < 1
    assert ours["mask_map"] == pytest.approx(float(evaluation.stats[0]), abs=1e-6)
    assert ours["mask_map_50"] == pytest.approx(float(evaluation.stats[1]), abs=1e-6)
