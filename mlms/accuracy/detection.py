"""COCO detection and instance-segmentation metrics by pycocotools (the COCO team's own
``COCOeval``).

Each kept detection goes back from the model input's pixels to its image's (the pipeline's
resize and centre crop undone), as a COCO result row ``[image_id, x, y, width, height, score,
category]`` whose category is the model's label: the zoo's detectors and COCO share category ids
(torchvision numbers its 91 classes as COCO does). The ground truth is the data set's own
annotations, for every image seen. An instance segmenter's masks (Mask R-CNN's, pasted at the
model input's size) go back the same way and are scored as COCO's RLEs with ``iouType`` segm.
``COCOeval`` runs once, on the whole pass, in ``finish``.
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
    dataset: dict[str, Any], results: np.ndarray | list[dict[str, Any]], iou_type: str = "bbox"
) -> dict[str, float]:
    """``COCOeval``'s stats for ground truth ``dataset`` (COCO's instances JSON as a dict) and
    ``results``: rows ``[image_id, x, y, width, height, score, category]`` for boxes, COCO's
    result objects (with an RLE ``segmentation``) for masks; a stat COCO leaves at -1 (no
    object of that size) is left out."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if not len(results):
        return dict.fromkeys(STATS, 0.0)
    # pycocotools prints its progress; the record holds what matters of it.
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = dataset
        truth.createIndex()
        found = truth.loadRes(
            np.asarray(results, dtype=np.float64) if isinstance(results, np.ndarray) else results
        )
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


def image_mask(mask: np.ndarray, steps: Preprocessing, width: int, height: int) -> np.ndarray:
    """A mask over the model input's pixels as a ``height`` x ``width`` mask of its image: put
    back into the resized image where the crop took it from, then resized (nearest)."""
    from PIL import Image

    resized = resized_size(steps, width, height)
    left, top = crop_offset(steps, *resized)
    canvas = np.zeros((resized[1], resized[0]), np.uint8)
    rows, columns = mask.shape
    # A crop larger than the resized image padded it: those pixels lie outside the image.
    source = mask[max(0, -top) :, max(0, -left) :]
    window = canvas[max(0, top) : top + rows, max(0, left) : left + columns]
    window[:] = source[: window.shape[0], : window.shape[1]]
    picture = Image.fromarray(canvas).resize((width, height), Image.Resampling.NEAREST)
    return np.asarray(picture)


class CocoDetection(Scorer):
    """mAP and AR of a detector's kept boxes over a COCO-format data set; of an instance
    segmenter's masks too (``mask_`` metrics) where the annotations have segmentations."""

    task = "detection"

    def __init__(self, manifest: ModelManifest, categories: dict[int, str]) -> None:
        super().__init__()
        self._manifest = manifest
        self._categories = [{"id": i, "name": n} for i, n in sorted(categories.items())]
        self._images: list[dict[str, int]] = []
        self._annotations: list[dict[str, Any]] = []
        self._results: list[np.ndarray] = []
        self._masks: list[dict[str, Any]] = []

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
            if found.masks is not None:
                self._add_masks(image, found, rows)

    def _add_masks(self, image: ImageTruth, found: Detections, rows: np.ndarray) -> None:
        from pycocotools import mask as rle

        steps = self._manifest.inputs[0].preprocessing
        for mask, row in zip(found.masks, rows, strict=True):  # type: ignore[arg-type]
            full = image_mask(mask, steps, image.width, image.height)
            self._masks.append(
                {
                    "image_id": image.image_id,
                    "category_id": int(row[6]),
                    "segmentation": rle.encode(np.asfortranarray(full)),
                    "score": float(row[5]),
                }
            )

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
        truth = self.ground_truth()
        metrics = coco_metrics(truth, self.found())
        if self._masks and any("segmentation" in a for a in self._annotations):
            masks = coco_metrics(truth, self._masks, "segm")
            metrics |= {f"mask_{name}": value for name, value in masks.items()}
        return metrics
