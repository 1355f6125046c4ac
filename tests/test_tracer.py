"""Tracer: level gating, explicit-timestamp spans, containment parents, archive, Chrome export."""

from __future__ import annotations

import json
import random
import subprocess
import sys

from mlms.store.local import LocalStore
from mlms.tracer.archive import archive_key, read_spans, read_table, records_of, write_spans
from mlms.tracer.chrome import to_chrome
from mlms.tracer.hierarchy import innermost_containers
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent
from mlms.tracer.tracer import Tracer


def test_spans_above_the_active_level_record_nothing() -> None:
    tracer = Tracer(TraceLevel.MODEL)
    with tracer.span("app", TraceLevel.APPLICATION) as app:
        assert app is not None
        with tracer.span("layer", TraceLevel.FRAMEWORK) as layer:
            assert layer is None
        with tracer.run(1, TraceLevel.APPLICATION), tracer.span("m", TraceLevel.MODEL) as m:
            assert m is None
    assert [r.name for r in tracer.records()] == ["app"]
    silent = Tracer(TraceLevel.NO_TRACE)
    with silent.span("app", TraceLevel.APPLICATION):
        pass
    assert silent.records() == []


def test_run_never_raises_the_level_above_the_tracers() -> None:
    tracer = Tracer(TraceLevel.MODEL)
    with tracer.run(2, TraceLevel.FULL):
        assert tracer.active_level == TraceLevel.MODEL


def test_trace_ids_differ_when_the_random_module_is_reseeded() -> None:
    """Seeding Python's ``random`` (keras does, a test runner may) must not repeat trace ids:
    two evaluations would share one span archive."""
    trace_ids = set()
    for _ in range(3):
        random.seed(0)
        tracer = Tracer(TraceLevel.MODEL)
        with tracer.span("app", TraceLevel.APPLICATION):
            pass
        trace_ids.add(tracer.records()[0].trace_id)
    assert len(trace_ids) == 3


def test_innermost_container_per_thread() -> None:
    parents = [
        TimedEvent("outer", "", TraceLevel.MODEL, 0, 100, thread=1),
        TimedEvent("inner", "", TraceLevel.MODEL, 10, 50, thread=1),
        TimedEvent("other", "", TraceLevel.MODEL, 0, 100, thread=2),
    ]
    children = [
        TimedEvent("a", "", TraceLevel.FRAMEWORK, 10, 20, thread=1),
        TimedEvent("b", "", TraceLevel.FRAMEWORK, 60, 70, thread=1),
        TimedEvent("c", "", TraceLevel.FRAMEWORK, 60, 70, thread=2),
        TimedEvent("d", "", TraceLevel.FRAMEWORK, 90, 120, thread=1),
        TimedEvent("e", "", TraceLevel.FRAMEWORK, 5, 6, thread=3),
    ]
    assert innermost_containers(parents, children) == [1, 0, 2, None, None]


def test_profiler_events_become_children_and_survive_the_archive(tmp_path) -> None:
    tracer = Tracer(TraceLevel.FRAMEWORK)
    with tracer.run(2, TraceLevel.FRAMEWORK), tracer.span("model", TraceLevel.MODEL):
        pass
    (model,) = tracer.records()
    inside = model.start_ns + (model.end_ns - model.start_ns) // 4
    event = TimedEvent(
        "layer1.conv",
        "conv",
        TraceLevel.FRAMEWORK,
        inside,
        inside + 1,
        thread=model.thread,
        layer_index=0,
        attributes={"input_shapes": [[1, 3, 8, 8]], "flops": 42},
    )
    tracer.add_events([event], [model])
    tracer.shutdown()
    records = tracer.records()
    layer = next(r for r in records if r.level == TraceLevel.FRAMEWORK)
    assert layer.parent_id == model.span_id and layer.trace_id == model.trace_id
    assert (layer.start_ns, layer.end_ns, layer.run) == (inside, inside + 1, 2)
    assert layer.attributes["flops"] == 42

    store = LocalStore(tmp_path)
    write_spans(store, model.trace_id, records)
    frame = read_spans(store, model.trace_id)
    assert records_of(frame) == records
    chrome = to_chrome(read_table(store, model.trace_id))
    names = {e["name"] for e in chrome["traceEvents"] if e["ph"] == "X"}
    assert names == {"model", "layer1.conv"}
    json.dumps(chrome)


def test_a_process_that_reads_an_archive_and_exits_at_once_exits_cleanly(tmp_path) -> None:
    """What every short CLI command does (``mlms trace export``, ``mlms analyze``): read a
    trace's archive and exit. A reader that leaves work on Arrow's thread pools aborts such a
    process at exit in most runs, after its output was written."""
    tracer = Tracer(TraceLevel.MODEL)
    with tracer.run(0, TraceLevel.MODEL), tracer.span("model", TraceLevel.MODEL):
        pass
    tracer.shutdown()
    (model,) = tracer.records()
    store = LocalStore(tmp_path)
    write_spans(store, model.trace_id, [model])
    archive = store.path_of(archive_key(model.trace_id))
    script = (
        "import sys; from mlms.tracer.archive import read_parquet; "
        "data = open(sys.argv[1], 'rb').read(); read_parquet(data)"
    )
    for _ in range(10):
        run = subprocess.run([sys.executable, "-c", script, str(archive)], capture_output=True)
        assert run.returncode == 0, run.stderr.decode()
    # A small archive is decoded on the calling thread: Arrow's pool, whose threads such an
    # exit can catch mid-work, never starts.
    counted = (
        "import os, sys; from mlms.tracer.archive import read_parquet; "
        "threads = lambda: len(os.listdir('/proc/self/task')); before = threads(); "
        "read_parquet(open(sys.argv[1], 'rb').read()); read_parquet(sys.argv[1]); "
        "print(before, threads())"
    )
    run = subprocess.run([sys.executable, "-c", counted, str(archive)], capture_output=True)
    before, after = run.stdout.split()
    assert before == after, run.stderr.decode()
