"""Top-1 and top-5 of a classifier."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlms.accuracy.scorer import Scorer
from mlms.tasks.postprocess import Step


class TopKScorer(Scorer):
    """Top-1 and top-5 hits over the batches seen so far."""

    task = "classification"

    def __init__(self, predictor: Any = None) -> None:
        """``predictor``: whose ``postprocess`` gives the classes (none where they are handed
        over already post-processed)."""
        super().__init__()
        self._predictor = predictor
        self.top1 = self.top5 = 0

    def postprocess(self, outputs: np.ndarray, step: Step) -> np.ndarray:
        return self._predictor.postprocess(outputs, k=5, step=step)[0]

    def add(self, answers: np.ndarray, truth: np.ndarray) -> None:
        """``answers``: each row's classes, best first; ``truth``: each row's class."""
        self.top1 += int((answers[:, :1] == truth[:, None]).sum())
        self.top5 += int((answers[:, :5] == truth[:, None]).any(axis=1).sum())

    def metrics(self) -> dict[str, float]:
        return {"top1": self.top1 / self.samples, "top5": self.top5 / self.samples}
