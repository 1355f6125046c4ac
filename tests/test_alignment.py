"""Profiled events matched to predict calls (``mlms.predictors.alignment``), the one place
every predictor's layer capture goes through; the frameworks' own tests run it on real
profiles."""

from __future__ import annotations

import pytest

from mlms.predictors.alignment import per_predict
from mlms.predictors.base import PredictAnchor


def _span(mark: tuple[int, int]) -> tuple[int, int]:
    return mark


def test_events_go_to_the_mark_they_started_in_and_the_clock_to_its_call() -> None:
    marks = [(500, 900), (100, 400)]  # the profiler's order need not be the calls'
    anchors = [PredictAnchor(start_ns=10_000, thread=1), PredictAnchor(start_ns=20_000, thread=2)]
    events = [("late", 950), ("b1", 600), ("a2", 300), ("before", 50), ("a1", 100), ("b2", 900)]
    windows = per_predict(
        marks, anchors, _span, events, lambda e: e[1], profiler="p", marks_are="marks"
    )
    assert [w.mark for w in windows] == [(100, 400), (500, 900)]
    assert [[name for name, _ in w.events] for w in windows] == [["a1", "a2"], ["b1", "b2"]]
    assert [w.offset_ns for w in windows] == [10_000 - 100, 20_000 - 500]
    assert [w.anchor.thread for w in windows] == [1, 2]


def test_marks_without_events_still_map_the_clock() -> None:
    windows = per_predict(
        [(7, 9)], [PredictAnchor(start_ns=107, thread=0)], _span, profiler="p", marks_are="m"
    )
    assert windows[0].offset_ns == 100
    assert windows[0].events == []


def test_a_count_of_marks_other_than_the_calls_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"^torch\.profiler recorded 1 predict ranges for 2 "):
        per_predict(
            [(0, 1)],
            [PredictAnchor(0, 0), PredictAnchor(5, 0)],
            _span,
            profiler="torch.profiler",
            marks_are="predict ranges",
        )


def test_framework_events_are_named_by_the_framework_and_moved_to_the_host_clock() -> None:
    from dataclasses import dataclass

    from mlms.predictors.alignment import framework_events
    from mlms.tracer.levels import TraceLevel

    @dataclass(frozen=True)
    class Event:
        name: str
        start_ns: int
        end_ns: int

    marks = [Event("mark", 100, 400), Event("mark", 500, 900)]
    anchors = [PredictAnchor(start_ns=10_000, thread=1), PredictAnchor(start_ns=20_000, thread=2)]
    ops = [Event("conv", 120, 200), Event("relu", 210, 300), Event("conv", 600, 700)]
    events = framework_events(
        marks,
        anchors,
        ops,
        lambda window: (
            (op, index, op.name.upper(), op.name, {"calls": len(window)})
            for index, op in enumerate(window)
        ),
        profiler="p",
        marks_are="marks",
    )
    assert [(e.name, e.kind, e.layer_index, e.thread) for e in events] == [
        ("CONV", "conv", 0, 1),
        ("RELU", "relu", 1, 1),
        ("CONV", "conv", 0, 2),
    ]
    assert [(e.start_ns, e.end_ns) for e in events] == [
        (10_020, 10_100),
        (10_110, 10_200),
        (20_100, 20_200),
    ]
    assert {e.level for e in events} == {TraceLevel.FRAMEWORK}
    assert [e.attributes for e in events] == [{"calls": 2}, {"calls": 2}, {"calls": 1}]
