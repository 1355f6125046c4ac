"""COCO detection metrics by pycocotools (the COCO team's own ``COCOeval``).

Each kept detection goes back from the model input's pixels to its image's (the pipeline's
resize and centre crop undone), as a COCO result row ``[image_id, x, y, width, height, score,
category]`` whose category is the model's label: the zoo's detectors and COCO share category ids
(torchvision numbers its 91 classes as COCO does). The ground truth is the data set's own
annotations, for every image seen. ``COCOeval`` runs once, on the whole pass, in ``finish``.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import numpy as np

from mlms.accuracy.scorer import Scorer
from mlms.datasets.truth import ImageTruth
from mlms.manifest import ModelManifest, Preprocessing
from mlms.tasks.postprocess import Detections, Step, detections
from mlms.tasks.preprocess import crop_offset, resized_size

#: ``COCOeval.stats`` in order, by the names the record uses: AP over IoU .5:.95, at .5 and at
#: .75, by object size, then AR with 1, 10 and 100 detections an image, and by size at 100.
STATS = (
    "map",
    "map_50",
    "map_75",
    "map_small",
    "map_medium",
    "map_large",
    "ar_1",
    "ar_10",
    "ar_100",
    "ar_small",
    "ar_medium",
    "ar_large",
)


def coco_metrics(
    dataset: dict[str, Any], results: np.ndarray, iou_type: str = "bbox"
) -> dict[str, float]:
    """``COCOeval``'s stats for ground truth ``dataset`` (COCO's instances JSON as a dict) and
    ``results`` rows ``[image_id, x, y, width, height, score, category]``; a stat COCO leaves
    at -1 (no object of that size) is left out."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if not len(results):
        return dict.fromkeys(STATS, 0.0)
    # pycocotools prints its progress; the record holds what matters of it.
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = dataset
        truth.createIndex()
        found = truth.loadRes(np.asarray(results, dtype=np.float64))
        evaluation = COCOeval(truth, found, iou_type)
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return {name: float(v) for name, v in zip(STATS, evaluation.stats, strict=True) if v >= 0}


def image_boxes(boxes: np.ndarray, steps: Preprocessing, width: int, height: int) -> np.ndarray:
    """``x1, y1, x2, y2`` boxes in the model input's pixels as COCO's ``x, y, width, height``
    in the pixels of a ``width`` x ``height`` image, clipped to it."""
    resized = resized_size(steps, width, height)
    left, top = crop_offset(steps, *resized)
    scale = np.array([width / resized[0], height / resized[1]] * 2, dtype=np.float64)
    corners = (boxes.astype(np.float64) + np.array([left, top, left, top])) * scale
    corners = np.clip(corners, 0, [width, height, width, height])
    return np.concatenate([corners[:, :2], corners[:, 2:] - corners[:, :2]], axis=1)


class CocoDetection(Scorer):
    """mAP and AR of a detector's kept boxes over a COCO-format data set."""

    task = "detection"

    def __init__(self, manifest: ModelManifest, categories: dict[int, str]) -> None:
        super().__init__()
        self._manifest = manifest
        self._categories = [{"id": i, "name": n} for i, n in sorted(categories.items())]
        self._images: list[dict[str, int]] = []
        self._annotations: list[dict[str, Any]] = []
        self._results: list[np.ndarray] = []

    def postprocess(self, outputs: np.ndarray, step: Step) -> list[Detections]:
        return detections(self._manifest, outputs, step)

    def add(self, answers: list[Detections], truth: list[ImageTruth]) -> None:
        steps = self._manifest.inputs[0].preprocessing
        for image, found in zip(truth, answers, strict=True):
            self._images.append(
                {"id": image.image_id, "width": image.width, "height": image.height}
            )
            self._annotations.extend(json.loads(image.annotations))
            rows = np.empty((len(found.scores), 7))
            rows[:, 0] = image.image_id
            rows[:, 1:5] = image_boxes(found.boxes, steps, image.width, image.height)
            rows[:, 5] = found.scores
            rows[:, 6] = found.labels
            self._results.append(rows)

    def ground_truth(self) -> dict[str, Any]:
        """The images seen and their annotations as COCO's instances JSON."""
        return {
            "images": self._images,
            "annotations": self._annotations,
            "categories": self._categories,
        }

    def found(self) -> np.ndarray:
        """Every detection as a COCO result row (what ``coco_metrics`` scores)."""
        return np.concatenate(self._results) if self._results else np.empty((0, 7))

    def metrics(self) -> dict[str, float]:
        return coco_metrics(self.ground_truth(), self.found())
