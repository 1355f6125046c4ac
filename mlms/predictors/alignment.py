"""Which profiled events belong to which predict call, on which clock.

Every framework's profiler records, besides its own events, a mark around each predict call
(a named range or task); the predictor takes the host clock at each call (``PredictAnchor``).
The n-th mark by start is the n-th call: the events that started inside it are that call's,
and the call's anchor maps the profiler's clock onto the host clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Generic, TypeVar

from mlms.predictors.base import PredictAnchor

M = TypeVar("M")
E = TypeVar("E")


@dataclass(frozen=True)
class PredictWindow(Generic[M, E]):
    """One predict call as a profiler saw it."""

    mark: M
    anchor: PredictAnchor
    #: Added to a time on the profiler's clock (ns), it gives the host clock's.
    offset_ns: int
    #: The events that started inside the mark, by start.
    events: list[E]


def per_predict(
    marks: Iterable[M],
    anchors: Sequence[PredictAnchor],
    span: Callable[[M], tuple[int, int]],
    events: Iterable[E] = (),
    start: Callable[[E], int] | None = None,
    *,
    profiler: str,
    marks_are: str,
) -> list[PredictWindow[M, E]]:
    """The predict calls of ``anchors`` in order, each with its mark and events.

    ``span`` gives a mark's (start, end) and ``start`` an event's start, in nanoseconds on the
    profiler's clock. An event inside no mark (the profiler's own, a warm-up) belongs to no
    call. A count of marks other than the calls' fails, naming the ``profiler`` and what its
    marks are ("the TensorFlow profiler recorded 3 predict traces for 4 predict calls"): the
    calls could not be told apart."""
    ordered = sorted(marks, key=lambda mark: span(mark)[0])
    if len(ordered) != len(anchors):
        raise RuntimeError(
            f"{profiler} recorded {len(ordered)} {marks_are} for {len(anchors)} predict calls"
        )
    timed = sorted(((start(e), e) for e in events), key=itemgetter(0)) if start else []
    windows: list[PredictWindow[M, E]] = []
    position = 0
    for mark, anchor in zip(ordered, anchors, strict=True):
        begin, end = span(mark)
        inside: list[E] = []
        while position < len(timed) and timed[position][0] <= end:
            if timed[position][0] >= begin:
                inside.append(timed[position][1])
            position += 1
        windows.append(PredictWindow(mark, anchor, anchor.start_ns - begin, inside))
    return windows
