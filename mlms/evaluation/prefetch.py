"""A pipeline stage that prepares batches on a thread of its own, a few ahead of the model.

Reading a batch and preparing it (decoding images, preprocessing) happen on the stage's thread
while the model computes the batch before, so a data set's evaluation times the model, not the
decoder, as long as preparing a batch is quicker than predicting one. The stage's spans
("read", "preprocess") sit on its thread under the caller's span at the APPLICATION level; the
caller's "input wait" span shows the time the model stood waiting for it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from opentelemetry import context as otel_context

from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer

Raw = TypeVar("Raw")
Ready = TypeVar("Ready")

#: Batches prepared ahead: enough to absorb one slow batch, few enough to bound memory.
DEPTH = 3
_END = object()


class Prefetch(Generic[Raw, Ready]):
    """Iterate over ``prepare(raw)`` for each raw batch of ``source``; use it in a ``with``
    block so that its thread stops when the caller stops early."""

    def __init__(
        self,
        source: Iterator[Raw],
        prepare: Callable[[Raw], Ready],
        tracer: Tracer,
        *,
        depth: int = DEPTH,
    ) -> None:
        self._source, self._prepare, self._tracer = source, prepare, tracer
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._context = otel_context.get_current()
        self._thread = threading.Thread(target=self._work, name="mlms-prefetch", daemon=True)

    def __enter__(self) -> Prefetch[Raw, Ready]:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):  # free a put() that waits for room
                self._queue.get(timeout=0.05)
        self._thread.join()

    def __iter__(self) -> Iterator[Ready]:
        while True:
            with self._tracer.span("input wait", TraceLevel.APPLICATION):
                item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item  # type: ignore[misc]

    def _work(self) -> None:
        token = otel_context.attach(self._context)
        try:
            while not self._stop.is_set():
                with self._tracer.span("read", TraceLevel.APPLICATION):
                    raw = next(self._source, _END)
                if raw is _END:
                    break
                with self._tracer.span("preprocess", TraceLevel.APPLICATION):
                    ready = self._prepare(raw)  # type: ignore[arg-type]
                self._put(ready)
            self._put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(_Failure(exc))
        finally:
            otel_context.detach(token)

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error
