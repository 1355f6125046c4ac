"""MXNet predictor: a Gluon network, hybridized (static memory and shapes), from a ``.npz``.

MXNet 1.9 imports only beside numpy 1.23, so this module runs in MXNet's own virtualenv (the
framework table says which); ``mlms eval --framework mxnet`` reaches it through a child agent.

Layer profiling: MXNet's profiler names each event by its operator only ("Convolution",
"BatchNorm"), so layers are found by order. The hybridized network's symbol lists its nodes in
the order the cached graph executes them, each with its name, operator and output shape; the
profiled operators of one predict are aligned with that list, operator by operator. By default
MXNet runs runs of operators as one "bulk" event; while profiling, bulking is switched off
(``MXNET_EXEC_BULK_EXEC_INFERENCE=0``, engine bulk size 1) and the graph is rebuilt, so the
model-level run keeps MXNet's default execution. A bulk that remains (the cached graph's first
and last operators) is named after the layers it holds. Each predict is wrapped in a profiler
task ``mlms::predict`` whose start is matched to the host clock taken at the call (the anchor).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlms.assets.gluon_models import network, parameters
from mlms.errors import UnsupportedFramework
from mlms.predictors.alignment import framework_events
from mlms.predictors.base import LayerCapture, PredictAnchor, Predictor, anchor
from mlms.tracer.layer_kinds import normalise_kind

MARK = "mlms::predict"
BULK = "ImperativeBulk"
BULK_ENV = "MXNET_EXEC_BULK_EXEC_INFERENCE"
#: Engine events that are no operator of the model.
BOOKKEEPING = frozenset({"DeleteVariable", "WaitForVar"})


@dataclass(frozen=True)
class GraphNode:
    """One operator node of the hybridized graph, in execution order."""

    name: str
    op: str
    kind: str
    output_shape: tuple[int, ...]  # for one sample


@dataclass(frozen=True)
class OpEvent:
    name: str
    start_ns: int  # the profiler's clock
    end_ns: int


class MXNetPredictor(Predictor):
    framework = "mxnet"

    def __init__(self, manifest, asset_path, options):
        super().__init__(manifest, asset_path, options)
        self.require_precision(("fp32",))
        import mxnet as mx

        self._mx = mx
        self.ctx = _context(mx, options.device)
        with np.load(asset_path) as weights:
            self.net = network(weights)
            params = parameters(weights)
        with tempfile.TemporaryDirectory() as folder:
            # Gluon loads its own format; the names are the structural ones of the .npz.
            path = os.path.join(folder, "model.params")
            mx.nd.save(path, {key: mx.nd.array(value) for key, value in params.items()})
            self.net.load_parameters(path, ctx=self.ctx)
        self.graph = _graph_nodes(mx, self.net, tuple(manifest.inputs[0].shape))
        self._hybridize()
        self._anchors: list[PredictAnchor] | None = None
        self._last_shape: tuple[int, ...] | None = None

    @classmethod
    def framework_version(cls) -> str:
        import mxnet

        return mxnet.__version__

    def settings(self) -> dict[str, Any]:
        return {
            "device": self.options.device,
            "mx_context": str(self.ctx),
            "omp_threads": os.environ.get("OMP_NUM_THREADS", "default"),
            "dtype": "float32",
            "mode": "Gluon hybridized (static_alloc, static_shape)",
            "bulk_exec_inference": os.environ.get(BULK_ENV, "default (on)"),
        }

    def _hybridize(self) -> None:
        # Re-hybridizing drops the cached graph, so the next call rebuilds it with the
        # bulk-execution setting then in force.
        self.net.hybridize(static_alloc=True, static_shape=True)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        mx = self._mx
        self._last_shape = batch.shape
        data = mx.nd.array(batch, ctx=self.ctx, dtype=batch.dtype)
        if self._anchors is None:
            return self.net(data).asnumpy()
        task = mx.profiler.Task(mx.profiler.Domain("mlms"), MARK)
        self._anchors.append(anchor())
        task.start()
        logits = self.net(data).asnumpy()
        task.stop()
        return logits

    def close(self) -> None:
        self.net = None

    def _layer_events(self) -> Iterator[LayerCapture]:
        mx = self._mx
        capture = LayerCapture()
        previous_env = os.environ.get(BULK_ENV)
        os.environ[BULK_ENV] = "0"
        previous_bulk = mx.engine.set_bulk_size(1)
        self._hybridize()
        if self._last_shape is not None:  # build the unbulked graph outside the measurement
            self.predict(np.zeros(self._last_shape, np.float32))
        with tempfile.TemporaryDirectory() as folder:
            trace = Path(folder) / "profile.json"
            mx.profiler.set_config(
                profile_symbolic=True,
                profile_imperative=True,
                profile_memory=False,
                profile_api=False,
                aggregate_stats=False,
                filename=str(trace),
            )
            self._anchors = []
            mx.profiler.set_state("run")
            try:
                yield capture
            finally:
                mx.profiler.set_state("stop")
                anchors, self._anchors = self._anchors, None
                mx.engine.set_bulk_size(previous_bulk)
                if previous_env is None:
                    os.environ.pop(BULK_ENV, None)
                else:
                    os.environ[BULK_ENV] = previous_env
                self._hybridize()
            mx.profiler.dump(finished=False)
            events = read_trace(trace)
        marks, ops = split_events(events, len(anchors))
        capture.events = framework_events(
            marks,
            anchors,
            ops,
            lambda window: (
                (op, index, *_described(op, nodes))
                for index, (op, nodes) in enumerate(align(window, self.graph))
            ),
            profiler="the MXNet profiler",
            marks_are="predict tasks",
        )


def align(ops: list[OpEvent], graph: list[GraphNode]) -> list[tuple[OpEvent, list[GraphNode]]]:
    """Each profiled operator with the graph nodes it ran, matched in execution order.

    An operator takes the next graph node with its name; a bulk event takes the nodes between
    the last match and the next; bulks that hold no node and operators outside the graph (a
    copy of the input) keep their own name."""
    result: list[tuple[OpEvent, list[GraphNode]]] = []
    position = 0
    pending: OpEvent | None = None
    for op in ops:
        if op.name == BULK:
            pending = op
            continue
        found = next((j for j in range(position, len(graph)) if graph[j].op == op.name), None)
        if found is None:
            result.append((op, []))
            continue
        if pending is not None and found > position:
            result.append((pending, graph[position:found]))
        pending = None
        result.append((op, [graph[found]]))
        position = found + 1
    if pending is not None and position < len(graph):
        result.append((pending, graph[position:]))
    return result


def _described(op: OpEvent, nodes: list[GraphNode]) -> tuple[str, str, dict[str, Any]]:
    """(name, kind, attributes) of a profiled operator that ran ``nodes`` of the graph."""
    attributes: dict[str, Any] = {"op_type": op.name}
    if not nodes:
        return op.name, normalise_kind(op.name), attributes
    attributes["output_shape"] = list(nodes[-1].output_shape)
    if len(nodes) > 1:
        attributes["bulk_of"] = [node.name for node in nodes]
    return nodes[0].name, nodes[0].kind, attributes


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The chrome-trace events of an MXNet profile dump.

    MXNet dumps continuously: the first ``dump(finished=False)`` of a process writes the header
    and its events, later ones append events (to the file named then) and the closing brackets
    come only when the profiler is torn down at exit. So the events are read one object at a
    time, after the header where there is one."""
    text = path.read_text()
    decoder = json.JSONDecoder()
    position = text.index("[") + 1 if '"traceEvents"' in text[:200] else 0
    events: list[dict[str, Any]] = []
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] == "]":
            return events
        event, position = decoder.raw_decode(text, position)
        events.append(event)


def split_events(events: list[dict[str, Any]], count: int) -> tuple[list[OpEvent], list[OpEvent]]:
    """(the last ``count`` predict marks, operator intervals), each sorted by start.

    Operators come as begin/end pairs per thread ("B"/"E"); marks as async pairs ("b"/"e")."""
    open_ops: dict[Any, list[dict[str, Any]]] = {}
    ops: list[OpEvent] = []
    mark_starts: list[int] = []
    mark_ends: list[int] = []
    for event in events:
        phase, name = event.get("ph"), event.get("name")
        if event.get("cat") == "mlms" and name == MARK:
            if phase == "b":
                mark_starts.append(int(event["ts"]) * 1000)
            elif phase == "e":
                mark_ends.append(int(event["ts"]) * 1000)
        elif event.get("cat") != "operator" or name in BOOKKEEPING:
            continue
        elif phase == "B":
            open_ops.setdefault(event.get("tid"), []).append(event)
        elif phase == "E":
            stack = open_ops.get(event.get("tid"))
            if stack:
                begin = stack.pop()
                ops.append(OpEvent(name, int(begin["ts"]) * 1000, int(event["ts"]) * 1000))
    marks = [
        OpEvent(MARK, start, end)
        for start, end in zip(sorted(mark_starts), sorted(mark_ends), strict=False)
    ]
    ops.sort(key=lambda e: e.start_ns)
    return marks[-count:] if count else [], ops


def _graph_nodes(mx: Any, net: Any, shape: tuple[int, ...]) -> list[GraphNode]:
    """The network's operator nodes in execution order, with their output shape for one sample."""
    symbol = net(mx.sym.var("data"))
    internals = symbol.get_internals()
    _, shapes, _ = internals.infer_shape(data=(1, *shape))
    shape_of = dict(zip(internals.list_outputs(), shapes, strict=True))
    nodes = []
    for node in json.loads(symbol.tojson())["nodes"]:
        if node["op"] == "null":
            continue
        name = node["name"]
        attrs = node.get("attrs", {})
        # An Activation's kind is its function (relu), not "activation".
        kind = normalise_kind(attrs.get("act_type", node["op"]))
        output = shape_of.get(f"{name}_output", ())
        nodes.append(GraphNode(name.removesuffix("_fwd"), node["op"], kind, tuple(output[1:])))
    return nodes


def _context(mx: Any, device: str) -> Any:
    if not device.startswith("cuda"):
        return mx.cpu()
    index = int(device.partition(":")[2] or 0)
    gpus = mx.context.num_gpus()
    if index >= gpus:
        raise UnsupportedFramework(
            f"device {device!r} asked for, but this MXNet sees {gpus} GPU(s) (the mxnet wheel is "
            "CPU-only; install an mxnet-cuXXX build for GPUs)"
        )
    return mx.gpu(index)
