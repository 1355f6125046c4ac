"""Layer chains a library can run as one fused call: convolution, then batch norm (folded into
the convolution's bias at inference), then an activation, each the only consumer of the one
before (cuDNN's ``ConvolutionBiasActivationForward`` and its graph-API successors, oneDNN's
post-ops)."""

from __future__ import annotations

from dataclasses import dataclass

from mlms.bounds.graph import Layer, LayerGraph

#: Layer ops (module classes and functions) a fused convolution can end with -> the name of
#: the fused activation.
ACTIVATIONS = {"ReLU": "relu", "relu": "relu", "relu_": "relu", "ReLU6": "relu6"}


@dataclass(frozen=True)
class Chain:
    conv: Layer
    batchnorm: Layer | None
    activation: Layer | None

    @property
    def fused_activation(self) -> str:
        return ACTIVATIONS[self.activation.op] if self.activation else "none"

    @property
    def key(self) -> str:
        return fused_key(self.conv, self.fused_activation)

    @property
    def layers(self) -> list[Layer]:
        return [layer for layer in (self.conv, self.batchnorm, self.activation) if layer]


def fused_key(conv: Layer, activation: str) -> str:
    """The perfdb key of ``conv`` fused with a bias and ``activation`` (relu, relu6, none)."""
    return f"{conv.config}+bias+{activation}"


def fusable_chains(graph: LayerGraph) -> list[Chain]:
    chains = []
    for layer in graph.layers:
        if layer.kind != "conv" or len(layer.input_shapes) < 2 or len(layer.output_shape) != 4:
            continue
        batchnorm = _only_consumer(graph, layer, lambda c: c.kind == "batchnorm")
        last = batchnorm or layer
        activation = _only_consumer(graph, last, lambda c: c.op in ACTIVATIONS)
        if batchnorm or activation:
            chains.append(Chain(layer, batchnorm, activation))
    return chains


def _only_consumer(graph: LayerGraph, layer: Layer, accept) -> Layer | None:  # type: ignore[no-untyped-def]
    consumers = graph.consumers(layer.node)
    if len(consumers) != 1:
        return None
    consumer = graph.layer(consumers[0])
    return consumer if accept(consumer) else None
