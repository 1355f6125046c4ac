"""Measured passes over a stored data set (``--dataset``).

The model-level run of each batch size is one whole pass: every sample predicted once, in
batches streamed from the store and prepared with their truth by the prefetching stage
(``prefetch``), with each predict timed, the task's post-processing run as a pipeline step and
its answers scored on the scorer's own thread (``mlms.accuracy``). Its throughput is samples over
the pass's wall time, so a decoder slower than the model shows in it. Deeper leveled runs profile
the first ``iterations`` batches only: they exist for the layer structure, not the accuracy.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlms.accuracy.classification import TopKScorer
from mlms.accuracy.detection import CocoDetection
from mlms.accuracy.language import Perplexity
from mlms.accuracy.scorer import Scorer
from mlms.accuracy.segmentation import MaskScores
from mlms.accuracy.translation import Translations
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


class Hits:
    """A pass's scorer, read as the record's accuracy."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    @property
    def samples(self) -> int:
        return self.scorer.samples

    def accuracy(self, dataset: str, **provenance: str | None) -> Accuracy:
        metrics = self.scorer.finish()
        return Accuracy(
            task=self.scorer.task,
            metrics=metrics,
            top1=metrics.get("top1"),
            top5=metrics.get("top5"),
            samples=self.samples,
            dataset=dataset,
            **provenance,
        )


class TopK(Hits):
    """Top-1 and top-5 of classes handed over directly (a model's built-in split)."""

    def __init__(self) -> None:
        super().__init__(TopKScorer())

    def add(self, best: np.ndarray, truth: np.ndarray) -> None:
        self.scorer.samples += len(truth)
        self.scorer.add(best, truth)


@dataclass
class Pass:
    """One run over the data set: each full batch's predict latency (ns), the wall time (s)
    and the scores."""

    hits: Hits
    latencies: list[int] = field(default_factory=list)
    seconds: float = 0.0
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

    def prepare(self, raw: Any) -> tuple[np.ndarray, Any]:
        inputs = self.bound.inputs(raw, self._predictor.preprocess, self._pool, DECODE_WORKERS)
        return inputs, self.bound.truth(raw, inputs)

    def scorer(self) -> Scorer:
        """A new scorer of the data set's task."""
        bound, predictor = self.bound, self._predictor
        task = bound.index.task
        if task == "detection":
            return CocoDetection(bound.manifest, bound.index.categories or {})
        if task == "segmentation":
            return MaskScores(bound.manifest, len(bound.model_labels))
        if task == "language_modeling":
            return Perplexity(predictor)
        if task == "translation":
            return Translations(predictor, bound.tokenizer)
        return TopKScorer(predictor)

    def first(self, rows: int) -> tuple[np.ndarray, Any]:
        """The first ``rows`` samples (fewer if the data set is smaller), prepared."""
        return self.prepare(next(self._stream.batches(rows, limit=1)))

    @contextmanager
    def prefetched(
        self, tracer: Tracer, batch_size: int, limit: int | None = None
    ) -> Iterator[Prefetch[Any, tuple[np.ndarray, Any]]]:
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
    result = Pass(Hits(data.scorer()))
    scorer = result.hits.scorer
    step = functools.partial(post_step, tracer)
    # Only a pass over every sample is scored; a partial one (warm-up, deeper levels) counts.
    scored = limit is None
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
                    attributes={"mlms.batch_size": len(inputs)},
                ):
                    start = clock()
                    logits = predictor.predict(batch)
                    elapsed = clock() - start
            with tracer.span("postprocess", TraceLevel.APPLICATION):
                if isinstance(scorer, TopKScorer):
                    _check_outputs(data.bound, truth, logits.shape[1])
                answers = scorer.postprocess(logits, step)
            if scored:
                scorer.submit(answers, truth, len(inputs))
            else:
                scorer.samples += len(inputs)
            # A short last batch would pass for a faster predict.
            if len(inputs) == batch_size or (not result.latencies and done == target):
                result.latencies.append(elapsed)
            report(done, target)
    result.seconds = (clock() - began) / 1e9
    return result


def post_step(tracer: Tracer, name: str) -> AbstractContextManager[object]:
    """One post-processing step's span, inside the postprocess span."""
    return tracer.span(name, TraceLevel.APPLICATION)


def _check_outputs(bound: BoundDataset, truth: np.ndarray, outputs: int) -> None:
    if truth.size and int(truth.max()) >= outputs:
        raise InvalidArgument(
            f"data set {bound.index.name!r} has label {int(truth.max())}: model "
            f"{bound.manifest.name!r} has {outputs} outputs, so labels 0 to {outputs - 1}"
        )
