"""What each node ONNX Runtime ran costs: parameters and flops.

ONNX Runtime's profiler reports each node's input and output shapes and byte sizes, but neither
count: its ``parameter_size`` misses the weights it pre-packed at load (a Gemm's weight matrix is
gone from the node's inputs) and it counts no flops. So:

- params: elements of the weights (floating-point initializers of rank 1 or more; not a Clip's
  bounds or a Reshape's shape) that the model's own nodes consume, summed over the nodes the
  executed node stands for. Fusion (Conv with BatchNormalization, Relu, Clip or Add; the NCHWc
  rewrite) names the new node after its first node or after the tensor its last node writes;
  from there, the fused group runs back to the nearest node of the executed operator.
- flops: 2 per multiply-add of convolutions and matrix products (where nearly all the work is,
  and what torch's own counter counts), from the shapes ONNX Runtime reports for the node (what
  it ran, at the batch's size); a convolution's weight shape comes from the model, where ONNX
  Runtime lists it no longer or in a packed layout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Executed operator -> the model's operators it can stand for.
_ORIGINS = {
    "FusedConv": ("Conv",),
    "NhwcConv": ("Conv",),
    "NhwcFusedConv": ("Conv",),
    "FusedGemm": ("Gemm", "MatMul"),
    "Gemm": ("Gemm", "MatMul"),
    "FusedMatMul": ("MatMul",),
}
#: Operators ONNX Runtime folds into the convolution or matrix product before them.
_FUSED_AFTER = {
    "Add",
    "BatchNormalization",
    "Clip",
    "HardSigmoid",
    "LeakyRelu",
    "Relu",
    "Sigmoid",
    "Sum",
    "Tanh",
}
#: How far back a fused group reaches (Conv, BatchNormalization, Add, Relu).
_MAX_FUSED = 4


@dataclass(frozen=True)
class _Node:
    op_type: str
    inputs: tuple[str, ...]


class GraphCosts:
    """The model's nodes, which node writes each tensor, and its weights' shapes."""

    def __init__(self, graph: Any) -> None:
        from onnx import TensorProto

        floating = {
            TensorProto.FLOAT,
            TensorProto.FLOAT16,
            TensorProto.BFLOAT16,
            TensorProto.DOUBLE,
        }
        self._weights = {
            tensor.name: tuple(tensor.dims)
            for tensor in graph.initializer
            if tensor.data_type in floating and len(tensor.dims) > 0
        }
        self._nodes = {node.name: _Node(node.op_type, tuple(node.input)) for node in graph.node}
        self._producers = {tensor: node.name for node in graph.node for tensor in node.output}

    def origin(self, node_name: str) -> str | None:
        """The model's node an executed node is named after: itself, the node it was fused
        from ("fused <node>") or the node writing the tensor it is named after
        ("<tensor>_nchwc", "InsertedPrecisionFreeCast_<tensor>": a node that lost its fp16
        casts to its neighbours); None for a node ONNX Runtime added (a layout reorder)."""
        if node_name in self._nodes:
            return node_name
        base = node_name.removeprefix("fused ").removeprefix("InsertedPrecisionFreeCast_")
        base = base.removesuffix("_nchwc")
        if base in self._nodes:
            return base
        return self._producers.get(base)

    def costs(
        self,
        node_name: str,
        op_type: str,
        input_shapes: Sequence[Sequence[int]],
        output_shapes: Sequence[Sequence[int]],
    ) -> dict[str, Any]:
        """``params`` and, for a convolution or matrix product, ``flops`` of one executed
        node, from its name, operator and the shapes ONNX Runtime reported."""
        origin = self.origin(node_name)
        group = self._fused_group(origin, op_type) if origin else []
        params = sum(
            math.prod(self._weights[name])
            for node in group
            for name in self._nodes[node].inputs
            if name in self._weights
        )
        values: dict[str, Any] = {"params": params}
        main = self._nodes[group[-1]] if group else None
        weight = self._weights.get(main.inputs[1]) if main and len(main.inputs) > 1 else None
        flops = _flops(op_type, input_shapes, output_shapes, weight)
        if flops:
            values["flops"] = flops
        return values

    def _fused_group(self, origin: str, op_type: str) -> list[str]:
        """The model's nodes one executed node stands for, ending with its main node: back
        from ``origin`` through fusable nodes' inputs to the nearest node (breadth first) of
        the executed operator; just ``origin`` where none is in reach."""
        wanted = _ORIGINS.get(op_type, (op_type,))
        paths = [[origin]]
        for _ in range(_MAX_FUSED):
            found = next((p for p in paths if self._nodes[p[-1]].op_type in wanted), None)
            if found is not None:
                return found
            paths = [
                [*path, producer]
                for path in paths
                if self._nodes[path[-1]].op_type in _FUSED_AFTER
                for tensor in self._nodes[path[-1]].inputs
                if (producer := self._producers.get(tensor)) is not None
            ]
        return [origin]


def _flops(
    op_type: str,
    inputs: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    weight: tuple[int, ...] | None,
) -> float | None:
    """2 x multiply-adds of a convolution or matrix product; None for other operators."""
    main = _ORIGINS.get(op_type, (op_type,))[0]
    if not outputs or not inputs:
        return None
    out = outputs[0]
    if weight is None and len(inputs) > 1:
        weight = tuple(inputs[1])
    if main == "Conv" and weight:
        # Output channels from the weight: a blocked layout may pad the reported channels.
        channels = out[-1] if op_type.startswith("Nhwc") else out[1]
        return 2.0 * math.prod(out) / channels * math.prod(weight)
    if main == "ConvTranspose" and weight:
        return 2.0 * math.prod(inputs[0]) * math.prod(weight[1:])
    if main == "Gemm":
        # A is [M, K] or, transposed, [K, M]; the output is [M, N].
        return 2.0 * math.prod(out) * math.prod(inputs[0]) / out[0]
    if main == "MatMul":
        return 2.0 * math.prod(out) * inputs[0][-1]
    return None
