"""Semantic segmentation's mIoU and pixel accuracy by torchmetrics.

Both compare the model's class of every pixel of its input with the data set's mask taken
through the same resize and centre crop (nearest neighbour, so classes stay whole): the scores
are at the model's input resolution, as torchvision's reference evaluation resizes both.
Pixels marked ``IGNORE`` count for neither. mIoU is the mean over the classes of the model of
each class's intersection over union (torchmetrics' macro ``MulticlassJaccardIndex``); pixel
accuracy the share of pixels classed right (its micro ``MulticlassAccuracy``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlms.accuracy.scorer import Scorer
from mlms.datasets.mask_pairs import IGNORE
from mlms.manifest import ModelManifest
from mlms.tasks.postprocess import Step, class_map


def segmentation_metrics(classes: int) -> Any:
    """torchmetrics' mIoU and pixel accuracy over ``classes`` classes, as one collection."""
    from torchmetrics import MetricCollection
    from torchmetrics.classification import MulticlassAccuracy, MulticlassJaccardIndex

    return MetricCollection(
        {
            "miou": MulticlassJaccardIndex(classes, average="macro", ignore_index=IGNORE),
            "pixel_accuracy": MulticlassAccuracy(classes, average="micro", ignore_index=IGNORE),
        }
    )


class MaskScores(Scorer):
    """mIoU and pixel accuracy of a segmentation network over image and mask pairs."""

    task = "segmentation"

    def __init__(self, manifest: ModelManifest, classes: int) -> None:
        super().__init__()
        self._manifest = manifest
        self._metrics = segmentation_metrics(classes)

    def postprocess(self, outputs: np.ndarray, step: Step) -> Any:
        return class_map(self._manifest, outputs, step)

    def add(self, answers: Any, truth: np.ndarray) -> None:
        import torch

        self._metrics.update(answers, torch.from_numpy(truth).long())

    def metrics(self) -> dict[str, float]:
        return {name: float(value) for name, value in self._metrics.compute().items()}
