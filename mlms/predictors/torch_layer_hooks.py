"""Layer events for PyTorch on CUDA devices, without torch.profiler.

Why not torch.profiler there: its library (Kineto) takes over CUPTI's activity buffers whenever
a profile starts, CPU-only too, so with it running our CUPTI collector receives nothing (seen on
the H100 with torch 2.11: Kineto logs "bufferCompleted called with unknown buffer" for ours).
So on a CUDA device the layers come from forward hooks reading the host clock (``time.time_ns``,
the clock every span uses), and the operators that run outside any leaf module (a residual add,
a flatten) from a ``TorchFunctionMode`` that is switched off inside each leaf (the pre-hook leaves
it, the post-hook re-enters it), so the functional calls inside layers pay nothing. The events
have the same names as the profiler path's leaf layers; such an operator is named
``<module path>/<function>``. The events carry the same costs as the profiler path's
(``torch_layer_costs``); what a leaf allocated comes from the untimed counting pass, where
reading the allocator costs the measured run nothing.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, NamedTuple

from mlms.predictors.base import LayerCapture
from mlms.predictors.torch_layer_costs import Batch, Counted, LayerCosts, OutputMeta, output_meta
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

#: Tensor methods that read metadata and launch nothing; not worth an event.
_METADATA = {"size", "dim", "shape", "__get__", "__len__", "numel", "stride", "is_contiguous"}


class _Seen(NamedTuple):
    """What the hooks record of one layer call: raw values, converted after the block."""

    name: str  # "" for a predict's root module: layer indices restart there
    op_type: str
    path: str | None  # the leaf module's path; None for an operator outside every leaf
    start: int
    end: int
    input_shapes: list[Any]
    outputs: OutputMeta
    batch: Batch | None = None  # a root's: what the predict's costs are counted for


def hook_layer_events(torch: Any, model: Any, costs: LayerCosts) -> Iterator[LayerCapture]:
    """Generator body of ``profile_layers`` for a module on a CUDA device."""
    from torch.overrides import TorchFunctionMode

    capture = LayerCapture()
    clock, thread = time.time_ns, threading.get_ident()
    stack: list[tuple[str, bool, int]] = []  # (module path, is leaf, start ns)
    seen: list[_Seen] = []

    def pre_hook(path: str, leaf: bool):
        def hook(_module: Any, _inputs: Any) -> None:
            if leaf:
                mode.__exit__(None, None, None)
            stack.append((path, leaf, clock()))

        return hook

    def post_hook(module: Any, inputs: Any, output: Any) -> None:
        end = clock()
        path, leaf, start = stack.pop()
        if leaf:
            outputs = output_meta(output)  # before the mode is back: shape reads go through it
            seen.append(
                _Seen(path, type(module).__name__, path, start, end, _shapes(inputs), outputs)
            )
            mode.__enter__()
        elif not stack:
            first = inputs[0]
            batch = (first.shape, first.dtype, first.device)
            seen.append(_Seen("", "", None, start, end, [], (), batch))

    class OutsideLeaves(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if not stack or name in _METADATA:
                return func(*args, **kwargs)
            start = clock()
            result = func(*args, **kwargs)
            end = clock()
            path = stack[-1][0]
            label = f"{path}/{name}" if path else name
            seen.append(_Seen(label, name, None, start, end, _shapes(args), output_meta(result)))
            return result

    handles = []
    for path, module in model.named_modules():
        leaf = bool(path) and next(module.children(), None) is None
        handles.append(module.register_forward_pre_hook(pre_hook(path, leaf)))
        handles.append(module.register_forward_hook(post_hook))
    mode = OutsideLeaves()
    try:
        with mode:
            yield capture
    finally:
        for handle in handles:
            handle.remove()
    capture.events.extend(_events(seen, thread, costs))


def _events(seen: list[_Seen], thread: int, costs: LayerCosts) -> list[TimedEvent]:
    """Layer events in execution order, indexed from 0 within each predict, with their costs
    (counted for each predict's batch)."""
    events: list[TimedEvent] = []
    kinds: dict[str, str] = {}
    index = 0
    counted = Counted({}, {})
    calls: Counter[str] = Counter()  # of each leaf, within the predict
    for item in sorted(seen, key=lambda item: item.start):
        if not item.name:
            index = 0
            counted, calls = costs.count(item.batch), Counter()
            continue
        attributes: dict[str, Any] = {"op_type": item.op_type}
        if item.input_shapes:
            attributes["input_shapes"] = [list(shape) for shape in item.input_shapes]
        allocated = None
        if item.path:
            allocated = counted.allocated_bytes(item.path, calls[item.path])
            calls[item.path] += 1
        attributes |= costs.attributes(item.path, counted, item.outputs, allocated)
        kind = kinds.get(item.op_type) or kinds.setdefault(
            item.op_type, normalise_kind(item.op_type)
        )
        events.append(
            TimedEvent(
                item.name,
                kind,
                TraceLevel.FRAMEWORK,
                item.start,
                item.end,
                thread,
                layer_index=index,
                attributes=attributes,
            )
        )
        index += 1
    return events


def _shapes(values: Any) -> list[Any]:
    return [v.shape for v in values if hasattr(v, "dtype") and hasattr(v, "shape")]
