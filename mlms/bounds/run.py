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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import SpanProcessor

from mlms import hardware
from mlms.bounds.fusion import fusable_chains
from mlms.bounds.graph import LayerGraph
from mlms.bounds.layer_bench import (
    TENSOR_CORE_KINDS,
    BenchTask,
    FusedConv,
    LayerBench,
    device_label,
    library_stack,
    other_precision,
    run_in_child,
)
from mlms.bounds.lower_bound import Measured, batch_bound, framework_precisions, occurrence_keys
from mlms.bounds.perfdb import PerfDB
from mlms.bounds.record import BoundRecord, BoundRequest, save_bound
from mlms.bounds.sources import GraphSource, graph_source, source_graph
from mlms.catalog.resolve import resolve_model
from mlms.config import mlms_home
from mlms.errors import InvalidArgument, UnsupportedFramework
from mlms.evaluation.device_lock import exclusive_device, free_gpus
from mlms.evaluation.plan import checked_plan
from mlms.evaluation.precisions import PRECISIONS
from mlms.evaluation.progress import Progress, ProgressCallback
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.frameworks import loaded_apart, runs_apart
from mlms.hardware import HardwareInfo
from mlms.isolation import call_in_own_process
from mlms.manifest import ModelManifest
from mlms.predictors.registry import choose_framework, predictor_class
from mlms.store.base import ObjectStore
from mlms.tracer.carrier import context_from_pairs, context_pairs
from mlms.tracer.levels import TraceLevel

#: Told what the bound is doing now (a line for the terminal).
StepCallback = Callable[[str], None]
#: Runs the measured evaluation of a framework that must not share this process
#: (``mlms.frameworks.runs_apart``) in a child agent: the agent layer's
#: ``mlms.agent.child.evaluate_in_child``, given by the caller (agents sit above bounds).
MeasureApart = Callable[
    [EvaluationRequest, ObjectStore, ProgressCallback | None, otel_context.Context | None],
    EvaluationRecord,
]


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
    apart: MeasureApart | None = None,
) -> BoundRecord:
    """Run a bound in this process (benchmarks in a child process) and store its record.
    ``processors`` and ``parent`` go to the measured evaluation's tracer, as for ``evaluate``.

    The graph needs torch's compiler stack, which must not load beside TensorFlow
    (``mlms.isolation``): in a process that holds TensorFlow (its agent) the whole bound runs
    in a process of its own, and a TensorFlow measurement runs in a child agent, its spans in
    the caller's trace and the archive but not given to ``processors`` (they cannot cross a
    process). ``apart`` runs such a measurement; without it, a framework that runs apart is
    refused before any benchmark."""
    say = step or (lambda _line: None)
    report = progress or (lambda _event: None)
    manifest = resolve_model(request.model, store)
    source = graph_source(request.model, manifest, store)
    # A framework this machine cannot run fails now, not after minutes of benchmarks.
    framework, version = choose_framework(manifest, request.framework)
    if apart is None and runs_apart(framework):
        raise UnsupportedFramework(
            f"framework {framework!r} runs in a process of its own (a child agent), which "
            "this caller of the bound does not start; expected an agent or the embedded client"
        )
    held = loaded_apart()
    if held is not None:
        say(f"this process holds {held}: the bound runs in a process of its own")
        return call_in_own_process(
            _bound_elsewhere,
            request,
            store.url,
            context_pairs(parent),
            agent,
            bound_id,
            apart,
            what=f"the bound of {manifest.name!r}",
            on_note=lambda note: (say if note[0] == "step" else report)(note[1]),
        )

    info = hardware.detect()
    device = hardware.resolve(request.hw, info, free=free_gpus(mlms_home() / "locks"))
    layers = _benchmark_layers(request, manifest, source, device, store, say, report)
    say(f"measuring {manifest.name} ({'hardware' if _on_gpu(device) else 'framework'} level)")
    evaluation = _measure(
        request,
        manifest,
        (framework, version),
        device,
        store,
        progress,
        processors,
        parent,
        agent,
        apart if runs_apart(framework) else None,
    )
    record = _bound_record(request, info, device, layers, evaluation, store, bound_id)
    save_bound(store, record)
    return record


@dataclass
class _Layers:
    """The layer graph of each batch size and the benchmark of each of its configurations."""

    graphs: dict[int, LayerGraph]
    device_name: str
    libraries: dict[str, str]
    precisions: list[str]
    benches: dict[str, LayerBench] = field(default_factory=dict)
    benchmarked: int = 0  # run now
    cached: int = 0  # found in the perfdb
    seconds: float = 0.0


def _bound_record(
    request: BoundRequest,
    info: HardwareInfo,
    device: str,
    layers: _Layers,
    evaluation: EvaluationRecord,
    store: ObjectStore,
    bound_id: str | None,
) -> BoundRecord:
    """The bounds and what-ifs of each batch size, from the layer benchmarks and what the
    measured evaluation's trace says each layer took."""
    measured = measurements(store, evaluation)
    fw_precisions = framework_precisions(evaluation.settings, _on_gpu(device))
    return BoundRecord(
        id=bound_id or uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        request=request,
        model=evaluation.model.name,
        framework=evaluation.framework.name,
        framework_version=evaluation.framework.version,
        hardware=info,
        device=device,
        device_name=layers.device_name,
        libraries=layers.libraries,
        precisions=layers.precisions,
        framework_precisions=fw_precisions,
        benchmarked=layers.benchmarked,
        cached=layers.cached,
        bench_seconds=round(layers.seconds, 3),
        batches=[
            batch_bound(layers.graphs[b], layers.benches, measured[b], fw_precisions)
            for b in request.batch_sizes
        ],
    )


def _on_gpu(device: str) -> bool:
    return device.startswith("cuda")


def _benchmark_layers(
    request: BoundRequest,
    manifest: ModelManifest,
    source: GraphSource,
    device: str,
    store: ObjectStore,
    say: StepCallback,
    report: ProgressCallback,
) -> _Layers:
    """The torch network's layer graphs, and a benchmark of every configuration in them: from
    the perfdb where it has one, else run in a child process and kept in the perfdb."""
    import torch

    precisions = _precisions(torch, request, device)
    input_shape = tuple(manifest.inputs[0].shape)
    layers = _Layers(
        graphs={b: source_graph(source, (b, *input_shape)) for b in request.batch_sizes},
        device_name=device_label(torch, device),
        libraries=library_stack(torch, device),
        precisions=precisions,
    )
    perfdb = PerfDB(store, layers.device_name, layers.libraries, precisions, request.repeats)
    # The layers besides convolutions and GEMMs: an entry benchmarked for a model run at
    # another precision lacks this one's, and is benchmarked again at it.
    other = other_precision(request.model_precision)
    partial: dict[str, LayerBench] = {}  # such entries: their new times are added to them
    started = time.perf_counter()
    for batch_size, graph in layers.graphs.items():
        wanted = _wanted(graph)
        configs = graph.configs()
        for key in wanted:
            found = layers.benches.get(key) or perfdb.get(key)
            layer = configs.get(key)
            if found is None:
                continue
            if layer is None or layer.kind in TENSOR_CORE_KINDS or found.covers(other):
                layers.benches[key] = found
            else:
                partial[key] = found
        missing = [key for key in wanted if key not in layers.benches]
        layers.cached += len(wanted) - len(missing)
        if not missing:
            say(f"batch size {batch_size}: all {len(wanted)} layer configs in the perfdb")
            continue
        say(
            f"batch size {batch_size}: benchmarking {len(missing)} layer configs on "
            f"{layers.device_name} ({len(wanted) - len(missing)} in the perfdb)"
        )
        task = BenchTask(
            source=source,
            input_shape=[batch_size, *input_shape],
            device=device,
            precisions=precisions,
            repeats=request.repeats,
            keys=[key for key in configs if key in missing],
            model_precision=request.model_precision,
            fused=[
                FusedConv(conv_node=c.conv.node, activation=c.fused_activation)
                for c in _distinct_chains(graph)
                if c.key in missing
            ],
        )
        _run_benchmarks(task, perfdb, layers, report, partial)
    layers.seconds = time.perf_counter() - started
    return layers


def _run_benchmarks(
    task: BenchTask,
    perfdb: PerfDB,
    layers: _Layers,
    report: ProgressCallback,
    partial: dict[str, LayerBench],
) -> None:
    target = len(task.keys) + len(task.fused)
    batch_size = task.input_shape[0]
    with exclusive_device(mlms_home() / "locks", task.device):
        # Each entry is kept as it arrives: a bound stopped halfway resumes from there.
        for done, bench in enumerate(run_in_child(task), 1):
            earlier = partial.get(bench.key)
            bench = earlier.with_timings(bench.timings) if earlier is not None else bench
            perfdb.put(bench)
            layers.benches[bench.key] = bench
            layers.benchmarked += 1
            report(Progress(batch_size, "layer benchmarks", done, target))


def _measure(
    request: BoundRequest,
    manifest: ModelManifest,
    framework: tuple[str, str],
    device: str,
    store: ObjectStore,
    progress: ProgressCallback | None,
    processors: tuple[SpanProcessor, ...],
    parent: otel_context.Context | None,
    agent: dict[str, str] | None,
    apart: MeasureApart | None,
) -> EvaluationRecord:
    """The measured evaluation of the bound's model, deep enough to time every layer:
    hardware level on a GPU (kernels), framework level on a CPU; through ``apart`` when given
    (a framework that runs apart, which plans it on its side), else in this process, planned
    with the model and framework the bound resolved already."""
    measure = EvaluationRequest(
        model=request.model,
        framework=framework[0],
        hw=request.hw,
        batch_sizes=request.batch_sizes,
        iterations=request.iterations,
        min_seconds=request.min_seconds,
        precision=request.model_precision,
        trace_level=TraceLevel.HARDWARE if _on_gpu(device) else TraceLevel.FRAMEWORK,
    )
    if apart is not None:
        return apart(measure, store, progress, parent)
    plan = checked_plan(measure, manifest, framework, predictor_class(framework[0]))
    return evaluate(
        plan, store=store, progress=progress, processors=processors, parent=parent, agent=agent
    )


def _bound_elsewhere(
    request: BoundRequest,
    store_url: str,
    caller: list[tuple[str, str]],
    agent: dict[str, str] | None,
    bound_id: str | None,
    apart: MeasureApart | None,
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
        parent=context_from_pairs(caller),
        agent=agent,
        bound_id=bound_id,
        apart=apart,
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
        here = kernels[kernels["batch_size"] == batch.batch_size]
        kernel, traced = here["kernel (ms)"], here["predict (ms)"]
        result[batch.batch_size] = Measured(
            evaluation_id=evaluation.id,
            latency_ms=batch.latency_ms.p50,
            layers=dict(zip(keys, rows["ms"].astype(float), strict=True)),
            kernel_ms=float(kernel.iloc[0]) if len(kernel) else None,
            traced_ms=float(traced.iloc[0]) if len(traced) else None,
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
    """The precisions asked for, or every one the device has, with the model's own; one it
    lacks is an error."""
    if device == "cpu":
        have = ["fp32", "bf16"]
        default = ["fp32"]
    else:
        major, _minor = torch.cuda.get_device_capability(torch.device(device))
        # TF32 and BF16 arrive with Ampere (compute capability 8.0).
        have = list(PRECISIONS) if major >= 8 else ["fp32", "fp16"]
        default = have
    asked = list(request.precisions) if request.precisions is not None else default
    asked += [request.model_precision] if request.model_precision not in asked else []
    lacking = [p for p in asked if p not in have]
    if lacking:
        raise InvalidArgument(
            f"precision {', '.join(lacking)} is not available on {device}; expected some of "
            f"{', '.join(have)}"
        )
    return asked
