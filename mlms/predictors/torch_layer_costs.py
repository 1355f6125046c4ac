"""What each layer of a torch module costs: parameters, flops, output shapes and bytes, memory.

Both torch layer paths (torch.profiler on the CPU, replaced leaf forwards on CUDA) keep the
measured path lean (the CPU path records an output's shape and dtype objects, the CUDA path
only the clock) and turn what they saw into the same span attributes here, after the block.

Flops are torch's own count (``torch.utils.flop_counter.FlopCounterMode``: 2 per multiply-add of
convolutions and matrix products, the ops nearly all the work is in), taken in one extra forward
pass per input shape, outside the measured predicts: counting under a dispatch mode would slow
every operator of the run it measures. The counter tracks the module hierarchy, so each leaf
module's count is attached to that module's layer events by module path. Operators that run
outside every leaf module (a residual add, a flatten) own no parameters, and the counter gives
them no flops in the zoo's networks.

On CUDA the memory a layer allocated (net of what it freed) is read in a second extra pass, a
plain forward: the change in the caching allocator's allocated bytes across each leaf call.
Reading it costs about 150 us a call (``torch.cuda.memory_allocated`` builds the allocator's
whole statistics table; 17 us through the private ``torch._C._cuda_memoryStats``; measured on
an H100 host), which in the measured run's hooks would make resnet18's profiled predict ten
times slower. The allocator's count depends on the sequence of allocations, not on timing, so
the untimed pass gives the measured run's numbers (checked layer by layer on an H100). On the
CPU the profiler measures it in the run itself.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: A layer's tensor outputs as (shape, dtype) pairs, the objects torch hands out (no copies).
OutputMeta = tuple[tuple[Any, Any], ...]
#: A predict's input batch as (shape, dtype, device): what the flop count depends on.
Batch = tuple[Any, Any, Any]


def output_meta(output: Any) -> OutputMeta:
    """Shapes and dtypes of a layer's tensor outputs; cheap enough for the measured path.

    Keeps no reference to a tensor (that would hold its memory past the layer) and reads
    nothing from the device."""
    if hasattr(output, "shape") and hasattr(output, "dtype"):
        return ((output.shape, output.dtype),)
    if isinstance(output, tuple | list):
        return tuple((o.shape, o.dtype) for o in output if hasattr(o, "shape"))
    return ()


#: torch.nn's modules that only hold others: never a layer of their own.
_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})


def layer_modules(model: Any) -> Iterator[tuple[str, Any, bool]]:
    """Each module outside the layers, the root ("") first, and each layer, in
    ``named_modules``' order: (path, module, whether it is a layer). The layers are the modules
    of no children and torch.nn's own modules whole, as torch.fx keeps them (at inference
    ``nn.MultiheadAttention`` runs one fused operator, which any observer of the calls inside
    it turns off); what is inside a layer is left out."""
    inside = None  # the path prefix of the layer the walk is in, in pre-order
    for path, module in model.named_modules():
        if inside is not None and path.startswith(inside):
            continue
        kind = type(module)
        whole = kind.__module__.startswith("torch.nn.") and kind.__name__ not in _CONTAINERS
        layer = bool(path) and (whole or next(module.children(), None) is None)
        inside = f"{path}." if layer else None
        yield path, module, layer


def leaf_paths(model: Any) -> dict[str, Any]:
    """Module path -> module, for the layers (``layer_modules``)."""
    return {path: module for path, module, layer in layer_modules(model) if layer}


def layer_type(path: str, module: Any) -> str:
    """The class of the layer at ``path``: for a ``torch.export`` program's unflattened module
    (an ``InterpreterModule``, which runs the graph of whatever module it stands for), the
    class the program recorded for that path."""
    graph = getattr(module, "graph", None)
    if type(module).__name__ != "InterpreterModule" or graph is None:
        return type(module).__name__
    for node in graph.nodes:
        for where, qualified in (node.meta.get("nn_module_stack") or {}).values():
            if where == path:
                return str(qualified).rsplit(".", 1)[-1]
    return type(module).__name__


@dataclass(frozen=True)
class Counted:
    """What the untimed forward passes of one batch counted, by leaf module path."""

    flops: dict[str, float]  # per call
    allocated: dict[str, list[int]]  # bytes each call allocated, in call order (CUDA only)

    def allocated_bytes(self, path: str, call: int) -> int | None:
        """What call number ``call`` (from 0, within a predict) of a leaf allocated."""
        calls = self.allocated.get(path, [])
        return calls[call] if call < len(calls) else None


class LayerCosts:
    """The costs of one module's layers: parameters by module path, and what untimed forward
    passes count once per input batch: flops, and allocated bytes where ``allocated`` reads the
    device's allocated bytes."""

    def __init__(self, torch: Any, model: Any, allocated: Callable[[], int] | None = None) -> None:
        self._torch = torch
        self._model = model
        self._allocated = allocated
        leaves = leaf_paths(model)
        self.params = {
            path: sum(p.numel() for p in module.parameters()) for path, module in leaves.items()
        }
        # TorchScript modules take no hooks: no costs by module for them.
        self._leaves = {
            path: module
            for path, module in leaves.items()
            if not isinstance(module, torch.jit.ScriptModule)
        }
        self._counted: dict[tuple[tuple[int, ...], Any, Any], Counted] = {}

    def count(self, batch: Batch) -> Counted:
        """The counts for ``batch``: once per distinct batch, in untimed forward passes on
        zeros (flops and allocations depend on shapes only)."""
        shape, dtype, device = batch
        key = (tuple(shape), dtype, device)
        if key not in self._counted:
            inputs = self._torch.zeros(key[0], dtype=dtype, device=device)
            self._counted[key] = self._count(inputs)
        return self._counted[key]

    def attributes(
        self,
        path: str | None,
        counted: Counted,
        outputs: OutputMeta,
        allocated_bytes: int | None,
    ) -> dict[str, Any]:
        """Span attributes of one layer event: ``path`` is the leaf module's path, or None for
        an operator that runs outside every leaf module (it owns no parameters)."""
        values: dict[str, Any] = {"params": self.params.get(path, 0) if path else 0}
        if path and counted.flops.get(path):
            values["flops"] = counted.flops[path]
        if outputs:
            values["output_shapes"] = [list(shape) for shape, _ in outputs]
            values["activation_bytes"] = sum(
                math.prod(shape) * dtype.itemsize for shape, dtype in outputs
            )
        if allocated_bytes is not None:
            values["allocated_bytes"] = int(allocated_bytes)
        return values

    def _count(self, inputs: Any) -> Counted:
        allocated = self._allocations(inputs) if self._allocated is not None else {}
        return Counted(self._flops_per_call(inputs), allocated)

    def _flops_per_call(self, inputs: Any) -> dict[str, float]:
        """One forward pass under ``FlopCounterMode``.

        The counter sums a module's flops over all its calls (a module may run more than once
        in a forward pass), so each total is divided by the calls counted alongside."""
        from torch.utils.flop_counter import FlopCounterMode

        calls: Counter[str] = Counter()

        def pre_hook(path: str):
            def hook(_module: Any, _inputs: Any) -> None:
                calls[path] += 1

            return hook

        counter = FlopCounterMode(display=False, custom_mapping=_grouped_attention())
        with _leaf_hooks(self._leaves, pre_hook, None), counter:
            self._forward(inputs)
        # The counter names a module "<root class>.<module path>".
        prefix = f"{type(self._model).__name__}."
        flops: dict[str, float] = {}
        for name, by_op in counter.get_flop_counts().items():
            path = name.removeprefix(prefix)
            total = sum(by_op.values())
            if total and calls[path]:
                flops[path] = total / calls[path]
        return flops

    def _allocations(self, inputs: Any) -> dict[str, list[int]]:
        """One plain forward pass reading the device's allocated bytes around each leaf call.

        Not under the flop counter: a dispatch mode changes what some operators allocate (an
        evaluation-mode dropout copies its input under one)."""
        read = self._allocated
        allocated: dict[str, list[int]] = {}
        before = [0]  # leaves do not nest: one reading pending at a time

        def pre_hook(_path: str):
            def hook(_module: Any, _inputs: Any) -> None:
                before[0] = read()

            return hook

        def post_hook(path: str):
            calls = allocated.setdefault(path, [])

            def hook(_module: Any, _inputs: Any, _output: Any) -> None:
                calls.append(read() - before[0])

            return hook

        with _leaf_hooks(self._leaves, pre_hook, post_hook):
            self._forward(inputs)
        return allocated

    def _forward(self, inputs: Any) -> None:
        with self._torch.inference_mode():
            self._model(inputs)


@contextlib.contextmanager
def _leaf_hooks(
    leaves: dict[str, Any],
    pre_hook: Callable[[str], Callable[..., None]],
    post_hook: Callable[[str], Callable[..., None]] | None,
) -> Iterator[None]:
    """Forward hooks made for each leaf's path, removed on exit."""
    handles = []
    for path, module in leaves.items():
        handles.append(module.register_forward_pre_hook(pre_hook(path)))
        if post_hook is not None:
            handles.append(module.register_forward_hook(post_hook(path)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _grouped_attention() -> dict[Any, Any]:
    """torch's attention flop formulas for grouped-query attention too (Llama: fewer key and
    value heads than query heads, which ``scaled_dot_product_attention(enable_gqa=True)`` shares
    among the query heads): counted as the attention of as many key and value heads as queries,
    which is what runs. torch's own formulas reject the differing head counts."""
    from torch.utils.flop_counter import flop_registry

    def grouped(wrapped: Any) -> Any:
        formula = getattr(wrapped, "__wrapped__", wrapped)  # the formula of shapes

        def count(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
            heads = query[1]
            return formula(
                query, (key[0], heads, *key[2:]), (value[0], heads, *value[2:]), *args, **kwargs
            )

        return count

    return {
        op: grouped(formula)
        for op, formula in flop_registry.items()
        if "scaled_dot_product" in str(op) and "backward" not in str(op)
    }
