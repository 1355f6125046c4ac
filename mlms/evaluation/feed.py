"""How batches reach ``predict``: preprocessed on the host each iteration and, for a GPU,
copied from pinned memory as a pipeline step of its own; or put on the device before measuring
(``--input-on-device``), so that the loop times the model alone, like a bare loop."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mlms.evaluation.inputs import InputSource, Samples
from mlms.predictors.base import InputCopy, Predictor
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer

ON_DEVICE = "on the device, copied there before measuring"
PINNED = "pinned host memory, copied to the device asynchronously each iteration"
HOST = "host memory, read in place"


def host_batch(predictor: Predictor, samples: Samples) -> np.ndarray:
    if samples.tensor is not None:
        return samples.tensor
    return predictor.preprocess(samples.images)


def placement(predictor: Predictor, on_device: bool) -> str:
    """Where the measured predicts find their inputs, as the record says it."""
    if on_device:
        return ON_DEVICE
    return PINNED if predictor.copies_input else HOST


class Feed:
    """The batches of one batch size; ``copies`` holds the copies since the last ``clear``."""

    def __init__(
        self, predictor: Predictor, source: InputSource, batch_size: int, *, on_device: bool
    ) -> None:
        self._predictor, self._source, self._batch_size = predictor, source, batch_size
        self.copies: list[InputCopy] = []
        self._resident: list[Any] | None = None
        if on_device:
            # take(i) repeats after this many batches: each distinct one is copied once.
            period = source.size // math.gcd(source.size, batch_size)
            self._resident = [
                predictor.stage(host_batch(predictor, source.take(i, batch_size)))[0]
                for i in range(period)
            ]

    def next(self, index: int, tracer: Tracer) -> Any:
        """The ``index``-th batch, as ``predict`` takes it."""
        if self._resident is not None:
            return self._resident[index % len(self._resident)]
        with tracer.span("preprocess", TraceLevel.APPLICATION):
            batch = host_batch(self._predictor, self._source.take(index, self._batch_size))
        return staged(self._predictor, batch, tracer, self.copies)

    def clear(self) -> None:
        self.copies = []


def staged(predictor: Predictor, batch: np.ndarray, tracer: Tracer, copies: list[InputCopy]) -> Any:
    """``batch`` where ``predict`` reads it: copied to the device, as a pipeline step of its
    own (appended to ``copies``), where the predictor copies its inputs."""
    if not predictor.copies_input:
        return batch
    with tracer.span("input copy", TraceLevel.APPLICATION, kind="memcpy") as span:
        moved, copy = predictor.stage(batch)
        if span is not None and copy is not None:
            span.set_attribute("mlms.bytes", copy.bytes)
            span.set_attribute("mlms.device_seconds", copy.seconds)
    if copy is not None:
        copies.append(copy)
    return moved
