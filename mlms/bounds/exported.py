"""A ``torch.export`` program (``.pt2``) as the layer graph a bound reads: its graph gives the
layers and their shapes without the network's Python code.

An exported program is a flat graph of ATen operators whose nodes remember the module that ran
them (``nn_module_stack``). A call of a ``torch.nn`` module that ran one operator is lifted back
into that module (rebuilt from the operator's arguments, its weights the program's), so that
the layer reads as the zoo's architecture reads it: same name, operator, attributes and shapes,
hence the same configuration and the same perfdb entries. Everything else (a module's call that
ran several operators, an operator outside every leaf) stays an operator of its owner's path.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from pathlib import Path
from typing import Any

from mlms.bounds.graph import LayerGraph, traced_graph
from mlms.errors import InvalidArgument

#: Constructor arguments that an operator's arguments do not name, read from its tensors:
#: operator packet -> {constructor argument: (operator argument, how to read it)}.
_DERIVED: dict[str, dict[str, tuple[str, Any]]] = {
    **{
        f"conv{rank}d": {
            "out_channels": ("weight", lambda w, kw: w.shape[0]),
            "in_channels": ("weight", lambda w, kw: w.shape[1] * kw.get("groups", 1)),
            "kernel_size": ("weight", lambda w, kw: tuple(w.shape[2:])),
            "bias": ("bias", lambda b, kw: b is not None),
        }
        for rank in (1, 2, 3)
    },
    "linear": {
        "out_features": ("weight", lambda w, kw: w.shape[0]),
        "in_features": ("weight", lambda w, kw: w.shape[1]),
        "bias": ("bias", lambda b, kw: b is not None),
    },
    "batch_norm": {
        "num_features": ("running_mean", lambda m, kw: m.shape[0]),
        "affine": ("weight", lambda w, kw: w is not None),
    },
    "layer_norm": {
        "elementwise_affine": ("weight", lambda w, kw: w is not None),
        "bias": ("bias", lambda b, kw: b is not None),
    },
}
#: The operator argument holding the tensor a module is called on.
_INPUTS = ("input", "self")


def program_graph(
    program: Any,
    input_shape: tuple[int, ...],
    model: str = "",
    dtype: str = "float32",
    device: str = "cpu",
) -> LayerGraph:
    """The layer graph of ``program`` (an ``ExportedProgram``, or the path it was saved at)
    for one input of ``input_shape`` and ``dtype`` on ``device``; a batch size the program was
    not exported for is one line."""
    import torch
    from torch.export.passes import move_to_device_pass

    if isinstance(program, (str, Path)):
        program = torch.export.load(str(program))
    if device != "cpu":
        # A program keeps the device it was exported on, in its tensor constants and in the
        # operators that make tensors (a transformer's arange(..., device=cpu)): moved as a
        # whole, each of its layers runs on the device alone.
        program = move_to_device_pass(program, device)
    module = lifted_module(program)
    try:
        return traced_graph(module, input_shape, model, dtype, device)
    # The program's guards assert its input shapes; an operator that meets a shape it was not
    # traced for raises a RuntimeError or a ValueError. The first line says which.
    except (AssertionError, RuntimeError, ValueError) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise InvalidArgument(
            f"model {model!r}: its torch.export program does not run on an input "
            f"of shape {list(input_shape)} ({first[:160]}); expected the shape it was exported "
            "with, or a batch axis exported as dynamic (torch.export.Dim)"
        ) from None


def lifted_module(program: Any) -> Any:
    """The program's flat ``GraphModule`` with each one-operator call of a ``torch.nn``
    module turned back into a ``call_module`` of that module (see the module docstring)."""
    import torch.fx

    module = program.module()
    graph = module.graph
    calls: dict[str, list[Any]] = defaultdict(list)
    for node in graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if node.op == "call_function" and stack and _is_operator(node.target):
            calls[next(reversed(stack))].append(node)
    built: dict[str, Any] = {}
    for nodes in calls.values():
        if len(nodes) != 1:
            continue
        node = nodes[0]
        path, kind = next(reversed(node.meta["nn_module_stack"].values()))
        if not path:  # the program's root: its own module, no submodule to put back
            continue
        arguments = _arguments(node)
        argument = next((arguments[k] for k in _INPUTS if k in arguments), None)
        if not isinstance(argument, torch.fx.Node):
            continue
        layer = built.get(path) or _rebuilt(module, arguments, argument, node, kind)
        if layer is None:
            continue
        built[path] = layer
        module.set_submodule(path, layer, strict=False)
        with graph.inserting_before(node):
            call = graph.call_module(path, (argument,))
        call.meta = dict(node.meta)
        node.replace_all_uses_with(call)
        graph.erase_node(node)
    graph.eliminate_dead_code()
    module.recompile()
    return module


def _is_operator(target: Any) -> bool:
    return getattr(target, "overloadpacket", None) is not None


def _arguments(node: Any) -> dict[str, Any]:
    """An operator node's arguments by name, defaults filled in (empty where its schema does
    not bind them)."""
    from torch.fx.operator_schemas import normalize_function

    normalized = normalize_function(
        node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True
    )
    return dict(normalized.kwargs) if normalized is not None else {}


def _rebuilt(
    module: Any, arguments: dict[str, Any], argument: Any, node: Any, kind: str
) -> Any | None:
    """The ``torch.nn`` module of class ``kind`` that computes what ``node`` does on
    ``argument``; None when ``kind`` is no ``torch.nn`` class or the operator's arguments do
    not make one (a module of the user's own, an operator the class does not run)."""
    import torch

    package, _, name = kind.rpartition(".")
    cls = getattr(torch.nn, name, None)
    if not package.startswith("torch.nn.modules") or not isinstance(cls, type):
        return None
    tensors = {
        key: _fetch(module, value.target) if value.op == "get_attr" else None
        for key, value in arguments.items()
        if isinstance(value, torch.fx.Node) and value is not argument
    }
    plain = {k: v for k, v in arguments.items() if not isinstance(v, torch.fx.Node)}
    accepted = inspect.signature(cls).parameters
    options = {k: v for k, v in plain.items() if k in accepted and v != []}
    derived = _DERIVED.get(node.target.overloadpacket.__name__, {})
    try:
        for key, (source, read) in derived.items():
            if key in accepted:
                options[key] = read(tensors.get(source), plain)
        layer = cls(**options)
    except (AttributeError, TypeError, ValueError):  # a tensor it needs is computed, not held
        return None
    for key, value in plain.items():
        if key in vars(layer) and not callable(value):  # Dropout's p, Softmax's dim, ...
            setattr(layer, key, value)
    if not _holds(layer, tensors):
        return None
    return layer.eval()


def _fetch(module: Any, target: str) -> Any:
    """The tensor a ``get_attr`` node reads."""
    owner, _, leaf = target.rpartition(".")
    return getattr(module.get_submodule(owner), leaf)


def _holds(layer: Any, tensors: dict[str, Any]) -> bool:
    """Give ``layer`` the program's tensors of its own names (weight, bias, running_mean,
    ...), shared, on the program's device; False when one is missing or of another shape (the
    rebuilt module is not the one that ran)."""
    import torch

    parameters = dict(layer.named_parameters(recurse=False))
    own = parameters | dict(layer.named_buffers(recurse=False))
    for key, tensor in own.items():
        given = tensors.get(key)
        if given is None or tuple(given.shape) != tuple(tensor.shape):
            if key == "num_batches_tracked":  # bookkeeping a program drops
                continue
            return False
        if key in parameters:
            given = torch.nn.Parameter(given.detach(), requires_grad=tensor.requires_grad)
        setattr(layer, key, given)
    return True
