"""Measured passes over a stored data set (``--dataset``).

The model-level run of each batch size is one whole pass: every sample predicted once, in
batches streamed from the store and prepared by the prefetching stage (``prefetch``), with each
predict timed and top-1/top-5 counted as the outputs come. Its throughput is samples over the
pass's wall time, so a decoder slower than the model shows in it. Deeper leveled runs profile
the first ``iterations`` batches only: they exist for the layer structure, not the accuracy.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlms.datasets.binding import BoundDataset
from mlms.datasets.stream import DatasetStream
from mlms.errors import InvalidArgument
from mlms.evaluation.feed import staged
from mlms.evaluation.prefetch import Prefetch
from mlms.evaluation.record import Accuracy
from mlms.predictors.base import InputCopy, Predictor
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer

#: Threads that decode and preprocess one batch's images side by side.
DECODE_WORKERS = max(1, min(4, (os.cpu_count() or 1) // 4))


@dataclass
class TopK:
    """Top-1 and top-5 hits over the batches seen so far."""

    top1: int = 0
    top5: int = 0
    samples: int = 0

    def add(self, best: np.ndarray, truth: np.ndarray) -> None:
        """``best``: each row's classes, best first; ``truth``: each row's class."""
        self.top1 += int((best[:, :1] == truth[:, None]).sum())
        self.top5 += int((best[:, :5] == truth[:, None]).any(axis=1).sum())
        self.samples += len(truth)

    def accuracy(self, dataset: str, **provenance: str | None) -> Accuracy:
        return Accuracy(
            top1=self.top1 / self.samples,
            top5=self.top5 / self.samples,
            samples=self.samples,
            dataset=dataset,
            **provenance,
        )


@dataclass
class Pass:
    """One run over the data set: each full batch's predict latency (ns), the wall time (s)
    and the hits."""

    latencies: list[int] = field(default_factory=list)
    seconds: float = 0.0
    hits: TopK = field(default_factory=TopK)
    copies: list[InputCopy] = field(default_factory=list)


class DatasetInputs:
    """A bound data set read as one predictor's batches."""

    def __init__(self, bound: BoundDataset, stream: DatasetStream, predictor: Predictor) -> None:
        self.bound, self._stream, self._predictor = bound, stream, predictor
        self._pool = ThreadPoolExecutor(DECODE_WORKERS, thread_name_prefix="mlms-decode")

    def close(self) -> None:
        self._pool.shutdown()

    @property
    def samples(self) -> int:
        return self.bound.index.samples

    def batches(self, batch_size: int) -> int:
        return math.ceil(self.samples / batch_size)

    def prepare(self, raw: Any) -> tuple[np.ndarray, np.ndarray]:
        inputs = self.bound.inputs(raw, self._predictor.preprocess, self._pool, DECODE_WORKERS)
        return inputs, self.bound.labels(raw)

    def first(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``rows`` samples (fewer if the data set is smaller), prepared."""
        return self.prepare(next(self._stream.batches(rows, limit=1)))

    @contextmanager
    def prefetched(
        self, tracer: Tracer, batch_size: int, limit: int | None = None
    ) -> Iterator[Prefetch[Any, tuple[np.ndarray, np.ndarray]]]:
        with Prefetch(self._stream.batches(batch_size, limit), self.prepare, tracer) as stage:
            yield stage


def run_pass(
    predictor: Predictor,
    data: DatasetInputs,
    tracer: Tracer,
    batch_size: int,
    *,
    limit: int | None,
    report: Callable[[int, int], None],
) -> Pass:
    """Predict every batch of the data set (the first ``limit`` ones where given)."""
    result = Pass()
    target = data.batches(batch_size) if limit is None else min(limit, data.batches(batch_size))
    clock = time.perf_counter_ns
    began = clock()
    with data.prefetched(tracer, batch_size, limit) as stage:
        for done, (inputs, truth) in enumerate(stage, start=1):
            batch = staged(predictor, inputs, tracer, result.copies)
            with tracer.span("predict", TraceLevel.APPLICATION):
                with tracer.span(
                    "model",
                    TraceLevel.MODEL,
                    kind="model",
                    attributes={"mlms.batch_size": len(truth)},
                ):
                    start = clock()
                    logits = predictor.predict(batch)
                    elapsed = clock() - start
            with tracer.span("postprocess", TraceLevel.APPLICATION):
                best, _ = predictor.postprocess(logits, k=5)
                _check_outputs(data.bound, truth, logits.shape[1])
                result.hits.add(best, truth)
            # A short last batch would pass for a faster predict.
            if len(truth) == batch_size or (not result.latencies and done == target):
                result.latencies.append(elapsed)
            report(done, target)
    result.seconds = (clock() - began) / 1e9
    return result


def _check_outputs(bound: BoundDataset, truth: np.ndarray, outputs: int) -> None:
    if truth.size and int(truth.max()) >= outputs:
        raise InvalidArgument(
            f"data set {bound.index.name!r} has label {int(truth.max())}: model "
            f"{bound.manifest.name!r} has {outputs} outputs, so labels 0 to {outputs - 1}"
        )
