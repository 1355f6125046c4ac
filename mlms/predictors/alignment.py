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
from typing import Any, Generic, Protocol, TypeVar

from mlms.predictors.base import PredictAnchor
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

M = TypeVar("M")
E = TypeVar("E")


class Interval(Protocol):
    """A profiled event's times, in nanoseconds on the profiler's clock."""

    @property
    def start_ns(self) -> int: ...

    @property
    def end_ns(self) -> int: ...


Ev = TypeVar("Ev", bound=Interval)
#: What a framework says of one profiled event of a predict call: the event, its layer slot,
#: the layer's name and kind, and the event's attributes.
Described = tuple[Ev, int, str, str, dict[str, Any]]


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


def framework_events(
    marks: Iterable[Interval],
    anchors: Sequence[PredictAnchor],
    events: Iterable[Ev],
    describe: Callable[[list[Ev]], Iterable[Described[Ev]]],
    *,
    profiler: str,
    marks_are: str,
) -> list[TimedEvent]:
    """The framework-level events of profilers whose marks and events carry their own times
    (MXNet's, TensorFlow's): each predict call's events, as ``describe`` names them, on the host
    clock and the calling thread."""
    windows = per_predict(
        marks,
        anchors,
        lambda mark: (mark.start_ns, mark.end_ns),
        events,
        lambda event: event.start_ns,
        profiler=profiler,
        marks_are=marks_are,
    )
    return [
        TimedEvent(
            name=name,
            kind=kind,
            level=TraceLevel.FRAMEWORK,
            start_ns=event.start_ns + window.offset_ns,
            end_ns=event.end_ns + window.offset_ns,
            thread=window.anchor.thread,
            layer_index=index,
            attributes=attributes,
        )
        for window in windows
        for event, index, name, kind, attributes in describe(window.events)
    ]
