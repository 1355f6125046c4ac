"""Benanza's analyzer: lower-bound latencies and what-if analyses from a layer graph, its
layers' benchmarks and a measured evaluation of the same model.

- Sequential lower bound: the sum of each layer's fastest time at the framework's precision.
- Parallel lower bound: the heaviest path through the layer graph weighted by those times.
- What-ifs, each "latency now -> latency if": the fastest algorithm instead of the heuristic's
  choice, fused convolution chains, tensor cores (lower precision), parallel layers, and, on a
  GPU, no framework overhead (only the kernels' time of a hardware-level run left; a CPU has no
  kernel time to set apart from the framework's).

Every input is a plain value: this module benchmarks and measures nothing itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from mlms.bounds.fusion import Chain, fusable_chains
from mlms.bounds.graph import Layer, LayerGraph
from mlms.bounds.layer_bench import HALF_PRECISIONS, TENSOR_CORE_KINDS, LayerBench, Timing
from mlms.bounds.record import BatchBound, LayerBound, WhatIf


@dataclass(frozen=True)
class Measured:
    """What an evaluation measured at one batch size."""

    evaluation_id: str
    latency_ms: float  # model level, p50
    #: Per layer, by (name, kind, occurrence): kernel time per predict (GPU) or latency (CPU).
    layers: dict[tuple[str, str, int], float]
    kernel_ms: float | None  # kernel time per predict (GPU)
    #: The traced predict (p50) the layers' and kernels' times come from (GPU): observing
    #: them costs its ratio to ``latency_ms``.
    traced_ms: float | None = None


def framework_precisions(settings: dict[str, object], gpu: bool) -> dict[str, str]:
    """The precision each layer kind runs at in a torch evaluation (``other``: the kinds
    besides convolutions and GEMMs): everything at a half precision the model was cast to;
    else fp32, where on a GPU convolutions run in TF32 when cuDNN may use it (torch's default)
    and GEMMs in TF32 only when matmuls may (not torch's default)."""
    precision = str(settings.get("precision", "fp32"))
    if precision in HALF_PRECISIONS:
        return {"conv": precision, "gemm": precision, "other": precision}
    if not gpu:
        return {"conv": "fp32", "gemm": "fp32", "other": "fp32"}
    return {
        "conv": "tf32" if settings.get("tf32_cudnn", True) else "fp32",
        "gemm": "tf32" if settings.get("tf32_matmul", False) else "fp32",
        "other": "fp32",
    }


def occurrence_keys(names_kinds: list[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """(owner, kind, n): the n-th layer of that kind under that module path, a key both the
    graph and a trace can compute (a trace names an operator ``path/aten::op``, the graph
    ``path/op``)."""
    seen: Counter[tuple[str, str]] = Counter()
    keys = []
    for name, kind in names_kinds:
        owner = name.split("/", 1)[0] if "/" in name else name
        keys.append((owner, kind, seen[(owner, kind)]))
        seen[(owner, kind)] += 1
    return keys


def batch_bound(
    graph: LayerGraph,
    benches: dict[str, LayerBench],
    measured: Measured,
    precisions: dict[str, str],
) -> BatchBound:
    chains = fusable_chains(graph)
    rows: dict[str, LayerBound] = {}
    keys = occurrence_keys([(layer.name, layer.kind) for layer in graph.layers])
    for layer, key in zip(graph.layers, keys, strict=True):
        rows[layer.node] = _layer_bound(
            layer, benches.get(layer.config), precisions, measured.layers.get(key)
        )
    bounds = {node: row.bound_ms for node, row in rows.items()}
    sequential = sum(bounds.values())
    parallel, path = graph.critical_path(bounds)
    for node in path:
        rows[node].on_critical_path = True
    what_ifs = [
        _best_algorithm(rows, measured.latency_ms),
        _fusion(chains, rows, benches, precisions, measured.latency_ms),
        _tensor_cores(rows, measured.latency_ms),
        WhatIf(
            name="parallel layers",
            now_ms=measured.latency_ms,
            if_ms=measured.latency_ms - (sequential - parallel),
            detail=(
                f"independent layers at once: the layers' bound {sequential:.3f} -> "
                f"{parallel:.3f} ms ({sequential / parallel:.2f}x)"
                if parallel > 0
                else "no layer time to run in parallel"
            ),
        ),
    ]
    if measured.kernel_ms is not None:
        what_ifs.append(
            WhatIf(
                name="no framework overhead",
                now_ms=measured.latency_ms,
                if_ms=measured.kernel_ms,
                detail="only the kernels' time per predict (hardware-level run) left"
                + _observed(measured),
            )
        )
    return BatchBound(
        batch_size=graph.batch_size,
        evaluation_id=measured.evaluation_id,
        measured_ms=measured.latency_ms,
        kernel_ms=measured.kernel_ms,
        traced_ms=measured.traced_ms,
        sequential_ms=sequential,
        parallel_ms=parallel,
        what_ifs=what_ifs,
        layers=list(rows.values()),
    )


def _observed(measured: Measured) -> str:
    """What the kernel time was read from: a traced predict slower than the untraced one ran
    its kernels under observation, which may have lengthened them."""
    if measured.traced_ms is None:
        return ""
    return (
        f"; read from traced predicts of {measured.traced_ms:.3f} ms, "
        f"{measured.traced_ms / measured.latency_ms:.2f}x the untraced"
    )


def _layer_bound(
    layer: Layer,
    bench: LayerBench | None,
    precisions: dict[str, str],
    measured: float | None,
) -> LayerBound:
    precision = precisions.get(layer.kind, precisions.get("other", "fp32"))
    # Strict fp32 is as exact as the framework's math, so its implementations count too.
    best = bench.fastest({precision, "fp32"}) if bench else None
    anywhere = bench.fastest({t.precision for t in bench.timings}) if bench else None
    own = bench.framework(precision) if bench else None
    none = Timing(variant="no kernel" if layer.free or bench else "not benchmarked",
                  precision=precision, median_ms=0.0, min_ms=0.0, repeats=0)  # fmt: skip
    best, anywhere = best or none, anywhere or best or none
    return LayerBound(
        name=layer.name,
        node=layer.node,
        kind=layer.kind,
        op=layer.op,
        input_shapes=[list(s) for s in layer.input_shapes],
        output_shape=list(layer.output_shape),
        config=layer.config,
        framework_ms=own.min_ms if own else None,
        bound_ms=best.min_ms,
        bound_variant=f"{best.variant} ({best.precision})",
        any_precision_ms=min(anywhere.min_ms, best.min_ms),
        any_precision_variant=f"{anywhere.variant} ({anywhere.precision})",
        measured_ms=measured,
    )


def _best_algorithm(rows: dict[str, LayerBound], now: float) -> WhatIf:
    convs = [r for r in rows.values() if r.kind == "conv" and r.framework_ms is not None]
    gains = [r.framework_ms - r.bound_ms for r in convs if r.framework_ms > r.bound_ms]  # type: ignore[operator]
    return WhatIf(
        name="best algorithm",
        now_ms=now,
        if_ms=now - sum(gains),
        detail=(
            f"{len(gains)} of {len(convs)} convolutions run faster in another implementation "
            f"than the framework's choice; {sum(gains):.3f} ms saved"
        ),
    )


def _fusion(
    chains: list[Chain],
    rows: dict[str, LayerBound],
    benches: dict[str, LayerBench],
    precisions: dict[str, str],
    now: float,
) -> WhatIf:
    precision = precisions.get("conv", "fp32")
    gain, fused = 0.0, 0
    for chain in chains:
        bench = benches.get(chain.key)
        best = bench.fastest({precision, "fp32"}) if bench else None
        if best is None:
            continue
        apart = sum(rows[layer.node].bound_ms for layer in chain.layers)
        if best.min_ms < apart:
            gain += apart - best.min_ms
            fused += 1
    return WhatIf(
        name="fusion",
        now_ms=now,
        if_ms=now - gain,
        detail=(
            f"{fused} of {len(chains)} conv(+batch norm)(+activation) chains faster as one fused "
            f"call; {gain:.3f} ms saved"
        ),
    )


def _tensor_cores(rows: dict[str, LayerBound], now: float) -> WhatIf:
    layers = [r for r in rows.values() if r.kind in TENSOR_CORE_KINDS]
    gains = [r.bound_ms - r.any_precision_ms for r in layers if r.any_precision_ms < r.bound_ms]
    used = Counter(
        r.any_precision_variant.rsplit("(", 1)[-1].rstrip(")")
        for r in layers
        if r.any_precision_ms < r.bound_ms
    )
    precisions = ", ".join(f"{p} for {n}" for p, n in used.most_common()) or "none faster"
    return WhatIf(
        name="tensor cores",
        now_ms=now,
        if_ms=now - sum(gains),
        detail=(
            f"{len(gains)} of {len(layers)} convolution and GEMM layers faster at a lower "
            f"precision ({precisions}); {sum(gains):.3f} ms saved"
        ),
    )
