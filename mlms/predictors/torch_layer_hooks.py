"""Layer events for PyTorch on CUDA devices, without torch.profiler.

Why not torch.profiler there: its library (Kineto) takes over CUPTI's activity buffers whenever
a profile starts, CPU-only too, so with it running our CUPTI collector receives nothing (seen on
the H100 with torch 2.11: Kineto logs "bufferCompleted called with unknown buffer" for ours).
So on a CUDA device the layers come from forward hooks reading the host clock (``time.time_ns``,
the clock every span uses), and the operators that run outside any leaf module (a residual add,
a flatten) from a ``TorchFunctionMode`` that is switched off inside each leaf (the pre-hook leaves
it, the post-hook re-enters it), so the functional calls inside layers pay nothing. The events
have the same names as the profiler path's leaf layers; such an operator is named
``<module path>/<function>``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from mlms.predictors.base import LayerCapture
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

#: Tensor methods that read metadata and launch nothing; not worth an event.
_METADATA = {"size", "dim", "shape", "__get__", "__len__", "numel", "stride", "is_contiguous"}


def hook_layer_events(torch: Any, model: Any) -> Iterator[LayerCapture]:
    """Generator body of ``profile_layers`` for a module on a CUDA device."""
    from torch.overrides import TorchFunctionMode

    capture = LayerCapture()
    clock, thread = time.time_ns, threading.get_ident()
    stack: list[tuple[str, bool, int]] = []  # (module path, is leaf, start ns)
    # (name, op type, start, end, input shapes), turned into events after the block: the hooks
    # run on the measured path and do as little as they can.
    seen: list[tuple[str, str, int, int, list[Any]]] = []

    def pre_hook(path: str, leaf: bool):
        def hook(_module: Any, _inputs: Any) -> None:
            if leaf:
                mode.__exit__(None, None, None)
            stack.append((path, leaf, clock()))

        return hook

    def post_hook(module: Any, inputs: Any, _output: Any) -> None:
        end = clock()
        path, leaf, start = stack.pop()
        if leaf:
            mode.__enter__()
            seen.append((path, type(module).__name__, start, end, _shapes(inputs)))
        elif not stack:
            seen.append(("", "", start, end, []))  # a predict's root: layer indices restart

    class OutsideLeaves(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if not stack or name in _METADATA:
                return func(*args, **kwargs)
            start = clock()
            result = func(*args, **kwargs)
            path = stack[-1][0]
            seen.append((f"{path}/{name}" if path else name, name, start, clock(), _shapes(args)))
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
        capture.events.extend(_events(seen, thread))


def _events(seen: list[tuple[str, str, int, int, list[Any]]], thread: int) -> list[TimedEvent]:
    """Layer events in execution order, indexed from 0 within each predict."""
    events: list[TimedEvent] = []
    kinds: dict[str, str] = {}
    index = 0
    for name, op_type, start, end, shapes in sorted(seen, key=lambda item: item[2]):
        if not name:
            index = 0
            continue
        attributes: dict[str, Any] = {"op_type": op_type}
        if shapes:
            attributes["input_shapes"] = [list(shape) for shape in shapes]
        kind = kinds.get(op_type) or kinds.setdefault(op_type, normalise_kind(op_type))
        events.append(
            TimedEvent(
                name,
                kind,
                TraceLevel.FRAMEWORK,
                start,
                end,
                thread,
                layer_index=index,
                attributes=attributes,
            )
        )
        index += 1
    return events


def _shapes(values: Any) -> list[Any]:
    return [v.shape for v in values if hasattr(v, "dtype") and hasattr(v, "shape")]
