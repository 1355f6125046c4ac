"""One bound: the layer graph, the layer benchmarks (from the perfdb where it has them), a
measured evaluation of the same model, framework, batch sizes and device, and the bounds and
what-ifs of each batch size, stored as a record.

The graph is the torch network's whatever the framework measured: a layer's bound belongs to
the model, the device and its libraries, not to the framework that runs it (Benanza sets one
bound beside MXNet, ONNX Runtime and PyTorch alike). Layers are matched to measured ones by
name only where the framework names them like torch does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import SpanProcessor

from mlms.agent.child import evaluate_in_child
from mlms.bounds.fusion import fusable_chains
from mlms.bounds.graph import LayerGraph, layer_graph
from mlms.bounds.layer_bench import (
    BenchTask,
    FusedConv,
    LayerBench,
    device_label,
    library_stack,
    run_in_child,
)
from mlms.bounds.lower_bound import Measured, batch_bound, framework_precisions, occurrence_keys
from mlms.bounds.perfdb import PerfDB
from mlms.bounds.record import PRECISIONS, BoundRecord, BoundRequest, save_bound
from mlms.config import mlms_home
from mlms.errors import InvalidArgument
from mlms.evaluation.device_lock import exclusive_device
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.runner import Progress, ProgressCallback, evaluate
from mlms.isolation import call_in_own_process
from mlms.predictors.registry import choose_framework, loaded_apart, runs_apart
from mlms.registry import hardware
from mlms.rpc.propagation import incoming_context, outgoing_metadata
from mlms.store.base import ObjectStore
from mlms.tracer.levels import TraceLevel
from mlms.zoo.resolve import resolve_model

#: Told what the bound is doing now (a line for the terminal).
StepCallback = Callable[[str], None]


def bound(
    request: BoundRequest,
    *,
    store: ObjectStore,
    step: StepCallback | None = None,
    progress: ProgressCallback | None = None,
    processors: tuple[SpanProcessor, ...] = (),
    parent: otel_context.Context | None = None,
    agent: dict[str, str] | None = None,
    bound_id: str | None = None,
) -> BoundRecord:
    """Run a bound in this process (benchmarks in a child process) and store its record.
    ``processors`` and ``parent`` go to the measured evaluation's tracer, as for ``evaluate``.

    The graph needs torch's compiler stack, which must not load beside TensorFlow
    (``mlms.isolation``): in a process that holds TensorFlow (its agent) the whole bound runs
    in a process of its own, and a TensorFlow measurement runs in a child agent, its spans in
    the caller's trace and the archive but not given to ``processors`` (they cannot cross a
    process)."""
    say = step or (lambda _line: None)
    report = progress or (lambda _event: None)
    manifest = resolve_model(request.model, store)
    if manifest.origin != "zoo":
        raise InvalidArgument(
            f"bound --model {request.model}: a bound rebuilds the zoo's torch architecture layer "
            f"by layer (Benanza); model {manifest.name!r} is a {manifest.origin} model, which "
            "has none: evaluate it with 'mlms eval' instead"
        )
    # A framework this machine cannot run fails now, not after minutes of benchmarks.
    framework, _version = choose_framework(manifest, request.framework)
    held = loaded_apart()
    if held is not None:
        say(f"this process holds {held}: the bound runs in a process of its own")
        return call_in_own_process(
            _bound_elsewhere,
            request,
            store.url,
            outgoing_metadata(parent),
            agent,
            bound_id,
            what=f"the bound of {manifest.name!r}",
            on_note=lambda note: (say if note[0] == "step" else report)(note[1]),
        )

    import torch

    from mlms.predictors.torch_predictor import architecture_of

    info = hardware.detect()
    device = hardware.resolve(request.hw, info)
    gpu = device.startswith("cuda")
    precisions = _precisions(torch, request, device)
    libraries = library_stack(torch, device)
    device_name = device_label(torch, device)
    perfdb = PerfDB(store, device_name, libraries, precisions, request.repeats)
    input_shape = tuple(manifest.inputs[0].shape)
    network = architecture_of(manifest).eval()
    graphs = {
        b: layer_graph(network, (b, *input_shape), manifest.name) for b in request.batch_sizes
    }

    started = time.perf_counter()
    benches: dict[str, LayerBench] = {}
    benchmarked = cached = 0
    for batch_size, graph in graphs.items():
        wanted = _wanted(graph)
        for key in wanted:
            found = benches.get(key) or perfdb.get(key)
            if found is not None:
                benches[key] = found
        missing = [key for key in wanted if key not in benches]
        cached += len(wanted) - len(missing)
        if not missing:
            say(f"batch size {batch_size}: all {len(wanted)} layer configs in the perfdb")
            continue
        say(
            f"batch size {batch_size}: benchmarking {len(missing)} layer configs on "
            f"{device_name} ({len(wanted) - len(missing)} in the perfdb)"
        )
        task = BenchTask(
            model=manifest.name,
            input_shape=[batch_size, *input_shape],
            device=device,
            precisions=precisions,
            repeats=request.repeats,
            keys=[key for key in graph.configs() if key in missing],
            fused=[
                FusedConv(conv_node=c.conv.node, activation=c.fused_activation)
                for c in _distinct_chains(graph)
                if c.key in missing
            ],
        )
        target = len(task.keys) + len(task.fused)
        with exclusive_device(mlms_home() / "locks", device):
            # Each entry is kept as it arrives: a bound stopped halfway resumes from there.
            for done, bench in enumerate(run_in_child(task), 1):
                perfdb.put(bench)
                benches[bench.key] = bench
                benchmarked += 1
                report(Progress(batch_size, "layer benchmarks", done, target))
    bench_seconds = time.perf_counter() - started

    say(f"measuring {manifest.name} ({'hardware' if gpu else 'framework'} level)")
    measure = EvaluationRequest(
        model=request.model,
        framework=framework,
        hw=request.hw,
        batch_sizes=request.batch_sizes,
        iterations=request.iterations,
        min_seconds=request.min_seconds,
        trace_level=TraceLevel.HARDWARE if gpu else TraceLevel.FRAMEWORK,
    )
    if runs_apart(framework):
        evaluation = evaluate_in_child(measure, store, progress, parent)
    else:
        evaluation = evaluate(
            measure,
            store=store,
            progress=progress,
            processors=processors,
            parent=parent,
            agent=agent,
        )
    measured = measurements(store, evaluation)
    fw_precisions = framework_precisions(evaluation.settings, gpu)
    record = BoundRecord(
        id=bound_id or uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        request=request,
        model=manifest.name,
        framework=evaluation.framework.name,
        framework_version=evaluation.framework.version,
        hardware=info,
        device=device,
        device_name=device_name,
        libraries=libraries,
        precisions=precisions,
        framework_precisions=fw_precisions,
        benchmarked=benchmarked,
        cached=cached,
        bench_seconds=round(bench_seconds, 3),
        batches=[
            batch_bound(graphs[b], benches, measured[b], fw_precisions) for b in request.batch_sizes
        ],
    )
    save_bound(store, record)
    return record


def _bound_elsewhere(
    request: BoundRequest,
    store_url: str,
    caller: list[tuple[str, str]],
    agent: dict[str, str] | None,
    bound_id: str | None,
    *,
    tell: Callable[[tuple[str, Any]], None],
) -> BoundRecord:
    """``bound`` in a process of its own; its steps and progress go back through ``tell``."""
    from mlms.store.factory import store_from_url

    return bound(
        request,
        store=store_from_url(store_url),
        step=lambda line: tell(("step", line)),
        progress=lambda event: tell(("progress", event)),
        parent=incoming_context(caller),
        agent=agent,
        bound_id=bound_id,
    )


def measurements(store: ObjectStore, evaluation: EvaluationRecord) -> dict[int, Measured]:
    """Per batch size: the model-level latency, each layer's measured time and the kernel time
    per predict, from a stored evaluation traced at framework level or deeper."""
    from mlms.analysis.engine import Spans
    from mlms.analysis.kernels import layer_kernels, predict_kernel_time
    from mlms.analysis.layers import layer_table

    if evaluation.trace_id is None:
        raise InvalidArgument(
            f"evaluation {evaluation.id} has no trace; a bound needs its layers measured "
            "(trace level framework or deeper)"
        )
    spans = Spans.from_store(store, [evaluation.trace_id])
    kernels = predict_kernel_time(spans)
    if len(kernels):
        per_layer = layer_kernels(spans)
        per_layer["ms"] = per_layer["gpu (us)"] / 1e3
    else:
        per_layer = layer_table(spans)
        per_layer["ms"] = per_layer["latency (ms)"]
    result = {}
    for batch in evaluation.results:
        rows = per_layer[per_layer["batch_size"] == batch.batch_size].sort_values("layer_index")
        keys = occurrence_keys(list(zip(rows["name"], rows["kind"], strict=True)))
        kernel = kernels[kernels["batch_size"] == batch.batch_size]["kernel (ms)"]
        result[batch.batch_size] = Measured(
            evaluation_id=evaluation.id,
            latency_ms=batch.latency_ms.p50,
            layers=dict(zip(keys, rows["ms"].astype(float), strict=True)),
            kernel_ms=float(kernel.iloc[0]) if len(kernel) else None,
        )
    return result


def _wanted(graph: LayerGraph) -> list[str]:
    return [*graph.configs(), *(c.key for c in _distinct_chains(graph))]


def _distinct_chains(graph: LayerGraph) -> list[Any]:
    chains: dict[str, Any] = {}
    for chain in fusable_chains(graph):
        chains.setdefault(chain.key, chain)
    return list(chains.values())


def _precisions(torch: Any, request: BoundRequest, device: str) -> list[str]:
    """The precisions asked for, or every one the device has; one it lacks is an error."""
    if device == "cpu":
        have = ["fp32", "bf16"]
        default = ["fp32"]
    else:
        major, _minor = torch.cuda.get_device_capability(torch.device(device))
        # TF32 and BF16 arrive with Ampere (compute capability 8.0).
        have = list(PRECISIONS) if major >= 8 else ["fp32", "fp16"]
        default = have
    if request.precisions is None:
        return default
    lacking = [p for p in request.precisions if p not in have]
    if lacking:
        raise InvalidArgument(
            f"precision {', '.join(lacking)} is not available on {device}; expected some of "
            f"{', '.join(have)}"
        )
    return list(request.precisions)
