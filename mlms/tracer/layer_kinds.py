"""One vocabulary of layer types across frameworks, so that "latency by layer type" compares.

Framework names (torch module classes, aten ops, ONNX ops, ...) map to: conv, batchnorm, relu,
activation, pool, gemm, add, mul, concat, softmax, dropout, reshape, pad, other.

TensorFlow op types arrive with oneDNN prefixes (``_MklNativeFusedConv2D``, ``_FusedMatMul``):
the prefix is dropped and a fused op is named for its main op. MXNet names ops by their operator
(``Convolution``, ``FullyConnected``, ``elemwise_add``, ``Pooling``).
"""

from __future__ import annotations

import re

_RULES: tuple[tuple[str, str], ...] = (
    (r"batch_?norm|fusedbatchnorm|^bn$", "batchnorm"),
    (r"conv", "conv"),
    (r"^(linear|gemm|matmul|dense|fullyconnected|addmm|mm|bmm|fc)$|matmul|gemm", "gemm"),
    (r"relu", "relu"),
    (r"pool|^mean$", "pool"),  # TF global average pooling is a Mean
    (r"softmax", "softmax"),
    (r"concat|^cat$", "concat"),
    (r"^(add|add_|sum|addv2|biasadd|elemwise_add|_plus|broadcast_add)$", "add"),
    (r"^(mul|mul_|elemwise_mul|_mul|broadcast_mul)$", "mul"),
    (r"dropout", "dropout"),
    (r"flatten|reshape|view|squeeze|transpose|identity|reorder", "reshape"),
    (
        r"sigmoid|tanh|gelu|silu|hardswish|hardtanh|clip|clamp|activation|lrn|"
        r"localresponsenorm",
        "activation",
    ),
    (r"pad", "pad"),
)


def normalise_kind(op_type: str) -> str:
    """Map a framework's op or layer type name to the shared vocabulary ("other" if unknown)."""
    key = op_type.lower().removeprefix("aten::").removeprefix("nn.").strip()
    key = re.sub(r"[0-9]d$", "", key)  # Conv2d -> conv, MaxPool2d -> maxpool
    key = re.sub(r"^_?(mklnative|mkl)?_?fused|^_(mklnative|mkl)", "", key)  # oneDNN in TF
    for pattern, kind in _RULES:
        if re.search(pattern, key):
            return kind
    return "other"
