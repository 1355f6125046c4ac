"""A model's layer graph with shapes: what Benanza's model processor reads from a network.

The torch network is traced with ``torch.fx`` (the graph and its edges), or read from a
``torch.export`` program (``mlms.bounds.exported``), and its shapes are propagated with fake
tensors (``FakeTensorProp``: no memory, no compute, so batch 256 costs the same as batch 1).
Every node that runs an operator becomes a ``Layer`` with its operator, the shapes and dtypes
of its tensor inputs, its output shape and the attributes that change its cost. Layers are
named the way the framework-level trace names them (a leaf module's path, an operator outside
every leaf as ``<module path>/<function>``), so a bound can be set beside the layer it bounds
in a measured evaluation.

A layer's ``config`` is everything its cost depends on and nothing else, so two layers (of one
model or of two) with equal configs share one benchmark.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from mlms.bounds.timing import LayerCall, rewriting
from mlms.tracer.layer_kinds import normalise_kind

log = logging.getLogger(__name__)

#: Kinds that move no data on a contiguous tensor (a view) or do nothing at inference.
FREE_KINDS = frozenset({"reshape", "dropout"})


@dataclass(frozen=True)
class Layer:
    name: str  # as in the framework-level trace
    node: str  # the fx node's unique name (the graph's key)
    kind: str  # the shared layer-type vocabulary (mlms.tracer.layer_kinds)
    op: str  # the module class or the function
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]
    dtype: str
    attributes: tuple[tuple[str, Any], ...] = ()  # what else changes the cost (sorted)

    @property
    def config(self) -> str:
        """A stable key of what the layer computes: op, attributes, shapes and dtype."""
        text = json.dumps(
            [self.op, self.attributes, self.input_shapes, self.dtype], default=str, sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @property
    def free(self) -> bool:
        return self.kind in FREE_KINDS

    def attribute(self, key: str, default: Any = None) -> Any:
        return dict(self.attributes).get(key, default)


@dataclass
class LayerGraph:
    model: str
    batch_size: int
    layers: list[Layer]  # in execution order
    edges: list[tuple[str, str]]  # (producer node, consumer node)
    traced: Any = field(default=None, repr=False)  # the torch.fx GraphModule, to run layers
    _by_node: dict[str, Layer] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_node = {layer.node: layer for layer in self.layers}

    def layer(self, node: str) -> Layer:
        return self._by_node[node]

    def consumers(self, node: str) -> list[str]:
        return [b for a, b in self.edges if a == node]

    def configs(self) -> dict[str, Layer]:
        """One layer per distinct config (the first in execution order)."""
        distinct: dict[str, Layer] = {}
        for layer in self.layers:
            if not layer.free:
                distinct.setdefault(layer.config, layer)
        return distinct

    def dag(self, weights: dict[str, float]) -> nx.DiGraph:
        graph = nx.DiGraph()
        for layer in self.layers:
            graph.add_node(layer.node, weight=weights.get(layer.node, 0.0))
        graph.add_edges_from(self.edges)
        return graph

    def critical_path(self, weights: dict[str, float]) -> tuple[float, list[str]]:
        """The heaviest path through the graph, each layer weighing ``weights[node]``: what
        the layers take when every independent layer runs in parallel."""
        graph = self.dag(weights)
        # networkx weighs edges; a node's weight is carried by the edges leaving it and a
        # virtual sink, so the heaviest path's edge sum is its layers' sum.
        sink = "\0sink"
        graph.add_node(sink, weight=0.0)
        for node in list(graph.nodes):
            if node != sink and graph.out_degree(node) == 0:
                graph.add_edge(node, sink)
        for a, b in graph.edges:
            graph.edges[a, b]["cost"] = graph.nodes[a]["weight"]
        path = nx.dag_longest_path(graph, weight="cost", default_weight=0.0)
        path = [node for node in path if node != sink]
        return sum(weights.get(node, 0.0) for node in path), path

    def isolate(self, layer: Layer, device: str, dtype: Any = None) -> LayerCall:
        """A call that runs ``layer`` alone on ``device``, on fresh random inputs of its
        shapes (floating point ones in ``dtype`` when given) and a copy of its module.

        Its priming reruns the layer's producer in the model (the node its first input comes
        from), alone as well, and the layer then reads what the producer just wrote, as in the
        model. Where that output is not a fresh tensor of the input's shape (a view, a tuple),
        or the producer does not run alone, the priming rewrites the layer's inputs in place
        instead."""
        node = next(n for n in self.traced.graph.nodes if n.name == layer.node)
        run, first, inputs = self._alone(node, device, dtype)
        source = node.args[0] if node.args else None
        if getattr(source, "op", None) in _COMPUTING:
            produce, source_first, _ = self._alone(source, device, dtype)
            try:
                held = [produce(source_first)]
            except Exception as exc:  # only the priming is lost: the layer itself still runs
                log.debug("%s's producer %s does not run alone: %s", layer.name, source, exc)
                return LayerCall(lambda: run(first), rewriting(inputs))
            if _written_like(held[0], first, source_first):

                def prime() -> None:
                    held[0] = produce(source_first)

                return LayerCall(lambda: run(held[0]), prime)
        return LayerCall(lambda: run(first), rewriting(inputs))

    def _alone(
        self, node: Any, device: str, dtype: Any
    ) -> tuple[Callable[[Any], Any], Any, tuple[Any, ...]]:
        """``node`` as a call on its first argument, that argument made at random, and every
        tensor it reads. A node read twice is one tensor read twice, as in the model: an
        operator may run otherwise on distinct tensors (self-attention's fused path needs its
        query, key and value to be one tensor)."""
        import torch

        made: dict[str, Any] = {}

        def value(arg: Any) -> Any:
            if arg.name not in made:
                made[arg.name] = _random_like(arg.meta.get("val"), device, dtype)
            return made[arg.name]

        args = torch.fx.node.map_arg(node.args, value)
        kwargs = torch.fx.node.map_arg(node.kwargs, value)
        first = args[0] if args else None
        inputs = tuple({id(t): t for t in made.values() if _is_tensor(t)}.values())

        if node.op == "call_module":
            module = copy.deepcopy(self.traced.get_submodule(node.target)).to(device)
            target = module if dtype is None else module.to(dtype)
        else:
            target = node.target

        def call(x: Any) -> Any:
            def swap(arg: Any) -> Any:  # ``x`` wherever the first argument is read
                return x if arg is first else arg

            positional = torch.fx.node.map_aggregate(args, swap)
            named = torch.fx.node.map_aggregate(kwargs, swap)
            if node.op == "call_method":
                return getattr(positional[0], target)(*positional[1:], **named)
            return target(*positional, **named)

        return call, first, inputs


def _random_like(meta: Any, device: str, dtype: Any) -> Any:
    """A tensor of ``meta``'s shape on ``device`` (floating point ones at random, in ``dtype``
    when given; token ids and masks zeros, which index anything), laid out in ``meta``'s order
    of axes where that is another than contiguous; ``meta`` itself if no tensor."""
    import torch

    if not _is_tensor(meta):
        return meta
    floating = meta.dtype.is_floating_point
    kind = (dtype or meta.dtype) if floating else meta.dtype
    shape = tuple(meta.shape)
    if _reordered(meta):
        made = torch.empty_strided(shape, tuple(meta.stride()), dtype=kind, device=device)
    else:
        made = torch.empty(shape, dtype=kind, device=device)
    return made.uniform_() if floating else made.zero_()


def _reordered(tensor: Any) -> bool:
    """Whether ``tensor`` is dense, each element once, but in another order of its axes than
    contiguous (a transpose's or a permute's view). An expanded view (a stride 0) is not: one
    element read as many is no layout a fresh tensor of its shape can have."""
    if tensor.is_contiguous():
        return False
    expected = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride(), strict=True), key=lambda p: p[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


#: fx node kinds that compute (placeholders and attributes are the model's inputs and weights).
_COMPUTING = frozenset({"call_module", "call_function", "call_method"})


def _written_like(output: Any, expected: Any, read: Any) -> bool:
    """Whether a producer's output is a tensor it wrote (itself after an in-place op, not a
    view of what it read), usable as ``expected``."""
    if not (_is_tensor(output) and _is_tensor(expected)):
        return False
    # Inference mode keeps no view links (``_base``): a view is told by its storage.
    view = (
        _is_tensor(read)
        and output is not read
        and output.untyped_storage().data_ptr() == read.untyped_storage().data_ptr()
    )
    return not view and output.shape == expected.shape and output.dtype == expected.dtype


def layer_graph(module: Any, input_shape: tuple[int, ...], model: str = "") -> LayerGraph:
    """The layer graph of a torch module for one float32 input of ``input_shape`` (with the
    batch axis first)."""
    import torch.fx

    return traced_graph(torch.fx.symbolic_trace(module), input_shape, model)


def traced_graph(
    traced: Any,
    input_shape: tuple[int, ...],
    model: str = "",
    dtype: str = "float32",
    device: str = "cpu",
) -> LayerGraph:
    """The layer graph of a ``torch.fx.GraphModule`` whose one placeholder takes an input of
    ``input_shape`` and ``dtype`` on ``device``; its leaf modules are ``call_module`` nodes."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    example = torch.empty(input_shape, dtype=getattr(torch, dtype), device=device)
    FakeTensorProp(traced, mode).propagate(mode.from_tensor(example))
    layers: list[Layer] = []
    edges: list[tuple[str, str]] = []
    # An op that is not a layer (getattr, getitem) passes its inputs' producers on.
    producers: dict[str, set[str]] = {}
    seen: Counter[str] = Counter()
    for node in traced.graph.nodes:
        inputs = set().union(*(producers.get(arg.name, set()) for arg in _node_args(node)))
        if node.op not in _COMPUTING or _first_tensor(node.meta.get("val")) is None:
            producers[node.name] = inputs
            continue
        layer = _layer(traced, node, seen)
        layers.append(layer)
        edges.extend((source, node.name) for source in sorted(inputs))
        producers[node.name] = {node.name}
    return LayerGraph(
        model=model,
        batch_size=input_shape[0],
        layers=layers,
        edges=sorted(set(edges)),
        traced=traced,
    )


def _layer(traced: Any, node: Any, seen: Counter[str]) -> Layer:
    tensors = [arg.meta["val"] for arg in _node_args(node) if _is_tensor(arg.meta.get("val"))]
    if node.op == "call_module":
        submodule = traced.get_submodule(node.target)
        op, name = type(submodule).__name__, str(node.target)
        attributes = _module_attributes(submodule)
        # A module's parameters are inputs of its operator: their shapes are part of its cost.
        shapes = [tuple(t.shape) for t in tensors] + [
            tuple(p.shape) for p in submodule.parameters(recurse=False)
        ]
    else:
        op = _function_name(node.target)
        stack = node.meta.get("nn_module_stack") or {}
        owner = next(reversed(stack.values()))[0] if stack else ""
        name = f"{owner}/{op}" if owner else op
        attributes = _constant_arguments(node)
        shapes = [tuple(t.shape) for t in tensors]
    # A tensor read in another order of its axes than contiguous (a transpose's view) costs
    # another walk through memory, or a copy: its strides are part of what the layer computes.
    reordered = [list(t.stride()) if _reordered(t) else None for t in tensors]
    if any(reordered):
        attributes = tuple(sorted((*attributes, ("input_strides", reordered))))
    seen[name] += 1
    # A layer of several outputs (attention's output and its weights) is shaped by its first.
    output = _first_tensor(node.meta["val"])
    return Layer(
        name=name,
        node=node.name,
        kind=normalise_kind(op),
        op=op,
        input_shapes=tuple(tuple(int(d) for d in s) for s in shapes),
        output_shape=tuple(int(d) for d in output.shape),
        dtype=str(output.dtype).removeprefix("torch."),
        attributes=attributes,
    )


def _function_name(target: Any) -> str:
    """A function's name as the network's code calls it: an ATen operator (a ``torch.export``
    graph's) by its packet, in-place or not (``aten.add_.Tensor`` is ``add``, like the
    ``x += y`` it was traced from)."""
    if isinstance(target, str):
        return target
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return packet.__name__.removesuffix("_")
    return target.__name__


#: Function arguments that change where the result goes, not what computing it costs (an
#: exported program writes ``relu(x, inplace=True)`` as the operator ``relu_``, no argument;
#: its ``arange(..., device=...)`` is one layer on whichever device the graph was read for).
_NOT_COST = frozenset({"inplace", "device"})


def _constant_arguments(node: Any) -> tuple[tuple[str, Any], ...]:
    """A function's constant arguments that change what computing it costs (positional ones
    named ``arg<i>``): not its tensors (their shapes are counted apart), nor where the result
    goes (``_NOT_COST``, or any argument its operator's schema types as a device)."""
    import torch

    schema = getattr(node.target, "_schema", None)
    declared = list(schema.arguments) if schema is not None else []
    places = {a.name for a in declared if str(a.type).removesuffix("?") == "Device"}
    skipped = _NOT_COST | places

    def kept(named: Iterable[tuple[str, Any, str]]) -> list[tuple[str, Any]]:
        return sorted(
            (key, _plain(value))
            for key, value, name in named
            if not hasattr(value, "meta")
            and not isinstance(value, torch.device)
            and name not in skipped
        )

    positional = kept((f"arg{i}", a, declared[i].name if i < len(declared) else "")
                      for i, a in enumerate(node.args))  # fmt: skip
    return tuple(positional + kept((k, v, k) for k, v in node.kwargs.items()))


#: Sizes per spatial axis that a module may hold as one int (``MaxPool2d(3)``) or one per axis
#: (``Conv2d``, a ``torch.export`` program's operator): written one per axis, so that both
#: describe the same layer alike.
_PER_AXIS = ("kernel_size", "stride", "padding", "dilation", "output_size")


def _module_attributes(module: Any) -> tuple[tuple[str, Any], ...]:
    """The constructor arguments that change what a module computes (``extra_repr``'s)."""
    keys = (
        "in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups",
        "padding_mode", "in_features", "out_features", "output_size", "ceil_mode",
        "count_include_pad", "eps", "min_val", "max_val", "negative_slope", "dim",
        "start_dim", "end_dim",
    )  # fmt: skip
    values = {key: _plain(getattr(module, key)) for key in keys if hasattr(module, key)}
    rank = re.search(r"([123])d$", type(module).__name__)
    for key in _PER_AXIS:
        if rank and isinstance(values.get(key), int):
            values[key] = [values[key]] * int(rank.group(1))
    if hasattr(module, "bias"):
        values["bias"] = module.bias is not None
    return tuple(sorted(values.items()))


def _node_args(node: Any) -> Iterator[Any]:
    yield from _flat_nodes((node.args, node.kwargs))


def _flat_nodes(value: Any) -> Iterator[Any]:
    import torch.fx

    if isinstance(value, torch.fx.Node):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _flat_nodes(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _flat_nodes(item)


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _first_tensor(value: Any) -> Any:
    """``value`` if a tensor, else the first tensor of a tuple or list of outputs, else None."""
    if _is_tensor(value):
        return value
    if isinstance(value, (list, tuple)):
        return next((item for item in value if _is_tensor(item)), None)
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)
