"""Layer events for PyTorch on CUDA devices, without torch.profiler.

Why not torch.profiler there: its library (Kineto) takes over CUPTI's activity buffers whenever
a profile starts, CPU-only too, so with it running our CUPTI collector receives nothing (seen on
the H100 with torch 2.11: Kineto logs "bufferCompleted called with unknown buffer" for ours).

So on a CUDA device the layers come from the host clock (``time.time_ns``, the clock every span
uses), read around each leaf module's ``forward``, which is replaced on the instance for the
block by a wrapper. The operators that run outside any leaf module (a residual add, a flatten)
are timed by a ``TorchFunctionMode`` that is switched off inside each leaf, so the functional
calls inside layers pay nothing. The events have the same names as the profiler path's leaf
layers; such an operator is named ``<module path>/aten::<operator>`` as the profiler names it
where its function has an ATen operator's name, and they carry the same costs
(``torch_layer_costs``). The operators outside leaves can still differ in number from the
profiler's: it records ATen operators, this path Python calls (one that dispatches nothing is
an event here; operators run under ``torch.vmap`` are one call here, several there).

The measured run pays as little per layer as it can, since at small batch sizes the host is the
bottleneck and every microsecond of ours lands in the layer's latency:

- No module hooks: registering any sends every module call, containers too, down
  ``Module._call_impl``'s slow path. On a 2-core CI VM (resnet50, batch 1, CPU) hooks that do
  nothing cost 5.8 us a leaf, a replaced ``forward`` reading the clock 1.2 us, with the mode
  switched around it 2.8 us; a mode left on inside leaves with a flag check 11 us.
  ``benchmarks/layer_capture_overhead.py`` measures it side by side with torch.profiler,
  ``benchmarks/layer_wrapper_cost.py`` the wrappers alone on near-empty leaves (each call's
  record a plain tuple, made a ``_Timed`` after the block: 1.2 us a layer call where the
  NamedTuple made on the path cost 1.7).
- Nothing but the clock on the measured path: what each call was (its type, input and output
  shapes) comes from one untimed pass per batch shape (``LayerCalls``), and the measured run's
  calls are matched to it in order. A model whose calls differ between the two passes (control
  flow on the data) is an error naming the first call that differs.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from mlms.errors import MlmsError
from mlms.predictors.base import LayerCapture
from mlms.predictors.torch_layer_costs import (
    Batch,
    Counted,
    LayerCosts,
    OutputMeta,
    layer_modules,
    layer_type,
    output_meta,
)
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

#: Tensor methods that read metadata and launch nothing; not worth an event.
_METADATA = {"size", "dim", "shape", "__get__", "__len__", "numel", "stride", "is_contiguous"}


#: Makes the stand-in for a module's forward from that forward.
Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


class LayerCall(NamedTuple):
    """One layer call of a predict, as the untimed pass saw it."""

    name: str  # the leaf's path, or "<container path>/<operator>" for an operator
    op_type: str  # the leaf's class name, or the operator's ("aten::add_")
    path: str | None  # the leaf module's path; None for an operator outside every leaf
    function: str  # the Python function an operator was called through; "" for a leaf
    input_shapes: list[Any]
    outputs: OutputMeta


class _Timed(NamedTuple):
    """What the measured run records of one call: which one, and two clock readings."""

    path: str | None
    function: str  # an operator's function name; "" for a leaf
    start: int
    end: int


class _Root(NamedTuple):
    start: int
    end: int
    batch: Batch


class HookedLayers:
    """Layer events of ``model`` on a CUDA device: ``capture()`` is the generator body of
    ``profile_layers``; the untimed passes' results are kept per batch shape."""

    def __init__(self, torch: Any, model: Any, costs: LayerCosts) -> None:
        self._torch = torch
        self._model = model
        self._costs = costs
        self._calls: dict[tuple[Any, ...], list[LayerCall]] = {}
        self._leaves: list[tuple[str, Any]] = []
        self._containers: list[str] = []  # the root ("") included
        for path, module, layer in layer_modules(model):
            if layer:
                self._leaves.append((path, module))
            else:
                self._containers.append(path)

    def capture(self) -> Iterator[LayerCapture]:
        from torch.overrides import TorchFunctionMode

        capture = LayerCapture()
        clock, thread = time.time_ns, threading.get_ident()
        # Plain tuples on the measured path, made _Timed after the block: a NamedTuple's
        # constructor costs more per leaf than the rest of the wrapper's bookkeeping.
        timed: list[tuple[str | None, str, int, int]] = []
        record = timed.append
        roots: list[_Root] = []
        depth = [0]  # predicts (root forwards) running: operators outside them are not layers

        class OutsideLeaves(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = getattr(func, "__name__", "")
                if not depth[0] or name in _METADATA:
                    return func(*args, **kwargs)
                start = clock()
                result = func(*args, **kwargs)
                record((None, name, start, clock()))
                return result

        mode = OutsideLeaves()

        def leaf(path: str) -> Wrapper:
            def wrap(forward: Callable[..., Any]) -> Callable[..., Any]:
                def timed_forward(*args: Any, **kwargs: Any) -> Any:
                    start = clock()
                    mode.__exit__(None, None, None)
                    try:
                        return forward(*args, **kwargs)
                    finally:
                        mode.__enter__()
                        record((path, "", start, clock()))

                return timed_forward

            return wrap

        def root(forward: Callable[..., Any]) -> Callable[..., Any]:
            def timed_forward(*args: Any, **kwargs: Any) -> Any:
                start = clock()
                depth[0] += 1
                try:
                    return forward(*args, **kwargs)
                finally:
                    depth[0] -= 1
                    first = args[0]
                    roots.append(_Root(start, clock(), (first.shape, first.dtype, first.device)))

            return timed_forward

        wrappers = {path: leaf(path) for path, _ in self._leaves}
        with _forwards_replaced(self._model, {**wrappers, "": root}), mode:
            yield capture
        capture.events.extend(self._events(list(map(_Timed._make, timed)), roots, thread))

    def calls(self, batch: Batch) -> list[LayerCall]:
        """The layer calls of one predict on ``batch``'s shape, in the order they start."""
        shape, dtype, device = batch
        key = (tuple(shape), dtype, device)
        if key not in self._calls:
            inputs = self._torch.zeros(key[0], dtype=dtype, device=device)
            self._calls[key] = self._describe(inputs)
        return self._calls[key]

    def _describe(self, inputs: Any) -> list[LayerCall]:
        """One untimed forward pass recording each layer call's name, type and shapes.

        An operator outside every leaf is named as torch.profiler names it on the CPU path
        where ATen has an operator of its function's name (``aten::add_``, ``aten::flatten``),
        else by the function (``__getitem__``: the profiler shows the ``aten::slice`` or
        ``aten::select`` it ran, which only a dispatch mode would see, and one changes what
        some models call)."""
        from torch.overrides import TorchFunctionMode

        torch = self._torch
        slots: list[LayerCall | None] = []  # a call's slot is taken when it starts
        stack: list[str] = []  # the container paths the running code is in

        class OutsideLeaves(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = getattr(func, "__name__", "")
                if not stack or name in _METADATA:
                    return func(*args, **kwargs)
                slot = len(slots)
                slots.append(None)
                result = func(*args, **kwargs)
                operator = _operator_name(torch, func, name)
                label = f"{stack[-1]}/{operator}" if stack[-1] else operator
                slots[slot] = LayerCall(
                    label, operator, None, name, _shapes(args), output_meta(result)
                )
                return result

        mode = OutsideLeaves()

        def leaf(path: str, op_type: str) -> Wrapper:
            def wrap(forward: Callable[..., Any]) -> Callable[..., Any]:
                def described(*args: Any, **kwargs: Any) -> Any:
                    slot = len(slots)
                    slots.append(None)
                    mode.__exit__(None, None, None)
                    try:
                        output = forward(*args, **kwargs)
                    finally:
                        mode.__enter__()
                    call = LayerCall(path, op_type, path, "", _shapes(args), output_meta(output))
                    slots[slot] = call
                    return output

                return described

            return wrap

        def container(path: str) -> Wrapper:
            def wrap(forward: Callable[..., Any]) -> Callable[..., Any]:
                def described(*args: Any, **kwargs: Any) -> Any:
                    stack.append(path)
                    try:
                        return forward(*args, **kwargs)
                    finally:
                        stack.pop()

                return described

            return wrap

        wrappers = {path: leaf(path, layer_type(path, module)) for path, module in self._leaves}
        wrappers |= {path: container(path) for path in self._containers}
        with self._torch.inference_mode(), _forwards_replaced(self._model, wrappers), mode:
            self._model(inputs)
        return [call for call in slots if call is not None]

    def _events(self, timed: list[_Timed], roots: list[_Root], thread: int) -> list[TimedEvent]:
        """Layer events in execution order, indexed from 0 within each predict, with their
        costs (counted for each predict's batch)."""
        timed.sort(key=lambda t: t.start)
        roots.sort(key=lambda r: r.start)
        events: list[TimedEvent] = []
        kinds: dict[str, str] = {}
        position = 0
        for root in roots:
            while position < len(timed) and timed[position].start < root.start:
                position += 1  # a call outside every predict: not a layer
            first = position
            while position < len(timed) and timed[position].end <= root.end:
                position += 1
            calls = self.calls(root.batch)
            counted = self._costs.count(root.batch)
            events.extend(self._predict(timed[first:position], calls, counted, kinds, thread))
        return events

    def _predict(
        self,
        timed: list[_Timed],
        calls: list[LayerCall],
        counted: Counted,
        kinds: dict[str, str],
        thread: int,
    ) -> Iterator[TimedEvent]:
        if len(timed) != len(calls):
            raise MlmsError(
                f"the measured predict made {len(timed)} layer calls where the untimed pass on "
                f"the same input shape made {len(calls)}: layer events need a model whose "
                "layers do not depend on the input's values"
            )
        called: Counter[str] = Counter()  # of each leaf, within the predict
        for index, (seen, call) in enumerate(zip(timed, calls, strict=True)):
            if seen.path != call.path or seen.function != call.function:
                raise MlmsError(
                    f"layer call {index} of the measured predict was "
                    f"{seen.path or seen.function!r} where the untimed pass on the same input "
                    f"shape ran {call.name!r}: layer events need a model whose layers do not "
                    "depend on the input's values"
                )
            attributes: dict[str, Any] = {"op_type": call.op_type}
            if call.input_shapes:
                attributes["input_shapes"] = [list(shape) for shape in call.input_shapes]
            allocated = None
            if call.path:
                allocated = counted.allocated_bytes(call.path, called[call.path])
                called[call.path] += 1
            attributes |= self._costs.attributes(call.path, counted, call.outputs, allocated)
            kind = kinds.get(call.op_type) or kinds.setdefault(
                call.op_type, normalise_kind(call.op_type)
            )
            yield TimedEvent(
                call.name,
                kind,
                TraceLevel.FRAMEWORK,
                seen.start,
                seen.end,
                thread=thread,
                layer_index=index,
                attributes=attributes,
            )


@functools.cache
def _operator_name(torch: Any, func: Any, function: str) -> str:
    """A dispatcher operator called as such by its qualified name (DTensor's all-reduce reaches
    the mode as ``_c10d_functional::all_reduce``), else ``aten::<function>`` where ATen has an
    operator of that name, else the name itself."""
    if isinstance(func, torch._ops.OpOverloadPacket):
        return func._qualified_op_name
    if isinstance(func, torch._ops.OpOverload):
        return func.name()
    # A dunder the namespace object has itself (``__eq__``) is Python's, not an operator.
    found = getattr(torch.ops.aten, function, None)
    return f"aten::{function}" if isinstance(found, torch._ops.OpOverloadPacket) else function


@contextlib.contextmanager
def _forwards_replaced(model: Any, wrappers: dict[str, Wrapper]) -> Iterator[None]:
    """Each module named in ``wrappers`` (by path) runs ``wrapper(its forward)`` instead of its
    forward while the block runs; put back afterwards, an instance's own forward included."""
    saved: list[tuple[Any, Any]] = []
    try:
        for path, module in model.named_modules():
            wrap = wrappers.get(path)
            if wrap is None:
                continue
            saved.append((module, module.__dict__.get("forward", _NONE)))
            module.forward = wrap(module.forward)
        yield
    finally:
        for module, own in reversed(saved):
            if own is _NONE:
                del module.forward
            else:
                module.forward = own


_NONE = object()


def _shapes(values: Any) -> list[Any]:
    return [v.shape for v in values if hasattr(v, "dtype") and hasattr(v, "shape")]
