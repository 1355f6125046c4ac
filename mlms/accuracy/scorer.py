"""What a pass over a data set feeds, and the scorer of each data set's task.

A pass predicts a batch, runs the task's post-processing (``Scorer.postprocess``, a span of the
measured pipeline, as it would be in production) and hands the result with the batch's truth to
``submit``: the scoring itself (matching boxes, counting pixels) runs on the scorer's own thread,
off the measured path, and ``finish`` waits for it. A task whose metric needs another model
call (a language model's log-likelihood of every token, a translation decoded token by token)
makes that call in ``metrics``, after the measured runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np

from mlms.tasks.postprocess import Step

#: Batches handed over and not yet scored, at most.
BACKLOG = 8


class Scorer(ABC):
    """One pass's accuracy for one task."""

    #: The data set task it scores (``mlms.datasets.index.DatasetTask``).
    task: ClassVar[str]

    def __init__(self) -> None:
        self.samples = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mlms-score")
        self._pending: list[Future[None]] = []

    @abstractmethod
    def postprocess(self, outputs: np.ndarray, step: Step) -> Any:
        """The model's raw outputs of one batch as the task's answers (on the measured path)."""

    @abstractmethod
    def add(self, answers: Any, truth: Any) -> None:
        """Score one batch (on the scoring thread, in batch order)."""

    @abstractmethod
    def metrics(self) -> dict[str, float]:
        """The task's metrics over every batch added."""

    def submit(self, answers: Any, truth: Any, rows: int) -> None:
        """Hand one batch of ``rows`` samples to the scoring thread."""
        self.samples += rows
        if len(self._pending) >= BACKLOG:
            # A scorer slower than the model holds the pass back rather than fill the memory.
            self._pending[0].result()
        for future in [f for f in self._pending if f.done()]:
            future.result()  # a scoring error surfaces at the next batch, not the pass's end
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(self.add, answers, truth))

    def finish(self) -> dict[str, float]:
        """The metrics, once every batch handed over is scored."""
        self._pool.shutdown(wait=True)
        for future in self._pending:
            future.result()
        self._pending = []
        return self.metrics()
