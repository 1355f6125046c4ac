"""One vocabulary of layer types across frameworks, so that "latency by layer type" compares.

Framework names (torch module classes, aten ops, ONNX ops, ...) map to: conv, batchnorm, relu,
activation, pool, gemm, add, mul, concat, softmax, dropout, reshape, pad, and for transformers
attention, layernorm, gelu, embedding; collectives between ranks (c10d's ops, NCCL's and gloo's)
communication (``mlms.tracer.communication``); else other.

gemm holds every matrix product, of weights (Linear, Gemm) or of activations (matmul, bmm): ONNX
writes a Linear as MatMul + Add, so no finer split would compare across frameworks. attention is
the fused attention core (torch's scaled_dot_product_attention and multi-head attention, ONNX
Runtime's Attention); where a framework runs it as separate operators they count as gemm and
softmax.

TensorFlow op types arrive with oneDNN prefixes (``_MklNativeFusedConv2D``, ``_FusedMatMul``):
the prefix is dropped and a fused op is named for its main op. MXNet names ops by their operator
(``Convolution``, ``FullyConnected``, ``elemwise_add``, ``Pooling``).
"""

from __future__ import annotations

import re

from mlms.tracer.communication import COMMUNICATION, is_communication

#: Names that mean something else than their words: transformers' Conv1D is GPT-2's linear layer.
_EXACT = {"Conv1D": "gemm"}

_RULES: tuple[tuple[str, str], ...] = (
    (r"attention", "attention"),
    (r"layer_?norm", "layernorm"),
    (r"embedding", "embedding"),
    (r"gelu", "gelu"),
    (r"batch_?norm|fusedbatchnorm|^bn$", "batchnorm"),
    (r"conv", "conv"),
    # (torch's MultiheadAttention names its output projection NonDynamicallyQuantizableLinear)
    (
        r"^(linear|gemm|matmul|dense|fullyconnected|addmm|mm|bmm|fc)$|quantizablelinear$|matmul|gemm|einsum",
        "gemm",
    ),
    (r"relu", "relu"),
    (r"pool|^mean$", "pool"),  # TF global average pooling is a Mean
    (r"softmax", "softmax"),
    (r"concat|^cat$", "concat"),
    (r"^(add|add_|sum|addv2|biasadd|elemwise_add|_plus|broadcast_add)$", "add"),
    (r"^(mul|mul_|elemwise_mul|_mul|broadcast_mul)$", "mul"),
    (r"dropout", "dropout"),
    (r"flatten|reshape|view|squeeze|transpose|identity|reorder", "reshape"),
    (
        r"sigmoid|tanh|silu|hardswish|hardtanh|clip|clamp|activation|lrn|"
        r"localresponsenorm",
        "activation",
    ),
    (r"pad", "pad"),
)


def normalise_kind(op_type: str) -> str:
    """Map a framework's op or layer type name to the shared vocabulary ("other" if unknown)."""
    if op_type in _EXACT:
        return _EXACT[op_type]
    if is_communication(op_type):
        return COMMUNICATION
    key = op_type.lower().removeprefix("aten::").removeprefix("nn.").strip()
    key = re.sub(r"[0-9]d$", "", key)  # Conv2d -> conv, MaxPool2d -> maxpool
    key = re.sub(r"^_?(mklnative|mkl)?_?fused|^_(mklnative|mkl)", "", key)  # oneDNN in TF
    for pattern, kind in _RULES:
        if re.search(pattern, key):
            return kind
    return "other"
