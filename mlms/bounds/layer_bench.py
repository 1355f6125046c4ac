"""Benanza's benchmark generator: each distinct layer configuration run alone, many times, in
every implementation the libraries offer, on the target device.

Implementations ("variants") of a layer at a precision:

``torch``
    the framework's own call (for a convolution: cuDNN with the plan torch's heuristic picks;
    for a linear layer: cuBLASLt; on the CPU: oneDNN or ATen), with torch's math switches set
    for the precision (fp32: no TF32; tf32: TF32 allowed).
``cudnn:<engine>``
    on a GPU, each cuDNN engine for the convolution (``mlms.bounds.cudnn_engines``).
``fused:...``
    a convolution fused with its bias and activation (batch norm folded into the bias): each
    cuDNN engine of the fused graph on a GPU, oneDNN's fused convolution on the CPU.

Convolutions and linear layers run at every requested precision (tensor cores: TF32, FP16,
BF16); the other layers at fp32, the precision the framework runs them at. Everything here
runs in a process of its own (``run_in_child``): the GPU timer starts torch.profiler, whose
CUPTI session must not meet the evaluation's own collector in one process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import sys
import time
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlms import errors
from mlms.bounds.fusion import fused_key
from mlms.bounds.graph import Layer, LayerGraph
from mlms.bounds.sources import GraphSource, example_input, source_graph
from mlms.bounds.timing import LayerCall, Timed, rewriting, screen_gpu, time_cpu, time_gpu
from mlms.errors import MlmsError

log = logging.getLogger(__name__)

#: Layer kinds whose libraries have tensor-core paths: these run at every precision.
TENSOR_CORE_KINDS = frozenset({"conv", "gemm"})
#: Precisions a model's weights and activations are cast to: every layer runs at them, not only
#: convolutions and GEMMs (TF32 is a way of computing fp32 products).
HALF_PRECISIONS = frozenset({"fp16", "bf16"})
#: Engines per precision timed in full after screening (besides torch and the heuristic's).
SCREEN_KEEP = 3


class Timing(BaseModel):
    """One implementation's time per call. A bound takes ``min_ms``, its fastest sample: the
    framework's own kernel, alone in the state it finds in the model, is the model's kernel,
    so a median would sit above the measurement as often as below."""

    variant: str
    precision: str
    median_ms: float
    min_ms: float
    repeats: int


class LayerBench(BaseModel):
    """The perfdb entry of one layer configuration on one device and library stack."""

    model_config = ConfigDict(frozen=True)

    key: str
    op: str
    kind: str
    input_shapes: list[list[int]]
    attributes: list[Any]
    device: str
    libraries: dict[str, str]
    timings: list[Timing]
    #: The engine cuDNN's heuristic ranks first, per precision (convolutions on a GPU).
    heuristic_engines: dict[str, str] = Field(default_factory=dict)

    def fastest(self, precisions: set[str]) -> Timing | None:
        timings = [t for t in self.timings if t.precision in precisions]
        return min(timings, key=lambda t: t.min_ms) if timings else None

    def with_timings(self, timings: list[Timing]) -> LayerBench:
        """This entry with ``timings`` added, each replacing one of the same variant and
        precision: a layer benchmarked at another precision later keeps the first ones."""
        new = {(t.variant, t.precision) for t in timings}
        kept = [t for t in self.timings if (t.variant, t.precision) not in new]
        ordered = sorted([*kept, *timings], key=lambda t: (t.variant, t.precision))
        return self.model_copy(update={"timings": ordered})

    def covers(self, precision: str) -> bool:
        """Whether it holds a time at ``precision``, or none at all (a layer that ran no
        kernel on the GPU, at any precision)."""
        return not self.timings or any(t.precision == precision for t in self.timings)

    def framework(self, precision: str) -> Timing | None:
        return next(
            (t for t in self.timings if t.variant == "torch" and t.precision == precision), None
        )


class FusedConv(BaseModel):
    """A convolution with what follows it folded in: batch norm (into the bias) and an
    activation."""

    model_config = ConfigDict(frozen=True)

    conv_node: str
    activation: str  # relu, relu6 or none

    def key(self, conv: Layer) -> str:
        return fused_key(conv, self.activation)


class BenchTask(BaseModel):
    """What a child process benchmarks: the configs of one model at one batch size."""

    source: GraphSource
    input_shape: list[int]
    device: str
    precisions: list[str]
    repeats: int
    keys: list[str]  # layer configs to run
    model_precision: str = "fp32"  # the precision of the layers other than tensor-core kinds
    fused: list[FusedConv] = Field(default_factory=list)


def run_in_child(task: BenchTask) -> Iterator[LayerBench]:
    """``benchmark(task)`` in a fresh spawned process (see the module docstring), each entry
    as soon as it is measured, so that a caller keeps what was done before a failure."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_child, args=(task, results), daemon=True)
    child.start()
    try:
        while True:
            try:
                kind, payload = results.get(timeout=1.0)
            except queue.Empty:
                if child.is_alive():
                    continue
                raise MlmsError(
                    f"the layer benchmarks of {task.source.model} at batch size "
                    f"{task.input_shape[0]} died with exit code {child.exitcode} on {task.device}"
                ) from None
            if kind == "bench":
                yield LayerBench.model_validate(payload)
            elif kind == "error":
                name, message = payload
                error = getattr(errors, name, None)
                if isinstance(error, type) and issubclass(error, MlmsError):
                    raise error(message)
                raise MlmsError(
                    f"the layer benchmarks of {task.source.model} failed: {name}: {message}"
                )
            else:
                return
    finally:
        if child.is_alive():
            child.kill()
        child.join()


def _child(task: BenchTask, results: Any) -> None:
    if level := os.environ.get("MLMS_LOG_LEVEL"):
        logging.basicConfig(level=level.upper(), stream=sys.stderr)
    try:
        for bench in benchmark(task):
            results.put(("bench", bench.model_dump()))
    except Exception as exc:  # the parent raises it; only its name and message cross over
        log.debug("the layer benchmarks failed", exc_info=True)  # where: MLMS_LOG_LEVEL=debug
        results.put(("error", (type(exc).__name__, str(exc))))
    else:
        results.put(("done", None))


def benchmark(task: BenchTask) -> Iterator[LayerBench]:
    import torch

    torch.manual_seed(0)
    graph = source_graph(task.source, tuple(task.input_shape), task.device)
    network = graph.traced
    if task.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(task.device))
    with torch.inference_mode():
        # One predict first leaves the process as a model run does: on the CPU, glibc's
        # allocator then serves a layer's output from the heap (its mmap threshold has grown
        # past it) instead of mapping fresh pages on every call, which tripled a 3 MB conv.
        network.to(task.device)(example_input(task.source, tuple(task.input_shape), task.device))
        network.cpu()
    stack = library_stack(torch, task.device)
    device_name = device_label(torch, task.device)
    wanted = set(task.keys)
    with torch.inference_mode():
        for key, layer in graph.configs().items():
            if key not in wanted:
                continue
            start = time.perf_counter()
            jobs, heuristics = _variants(torch, graph, layer, task)
            built = time.perf_counter()
            timed = _timed(torch, jobs, task, heuristics)
            _log(layer.op, layer, jobs, timed, built - start, time.perf_counter() - built)
            yield _entry(key, layer, device_name, stack, timed, heuristics)
            del jobs
            _release(torch, task.device)
        for fused in task.fused:
            conv = graph.layer(fused.conv_node)
            op = f"{conv.op}+bias+{fused.activation}"
            start = time.perf_counter()
            jobs, heuristics = _fused_variants(torch, graph, conv, fused.activation, task)
            built = time.perf_counter()
            timed = _timed(torch, jobs, task, heuristics)
            _log(op, conv, jobs, timed, built - start, time.perf_counter() - built)
            yield _entry(fused.key(conv), conv, device_name, stack, timed, heuristics, op=op)
            del jobs
            _release(torch, task.device)


def _release(torch: Any, device: str) -> None:
    """Give back the inputs, outputs and workspaces of the config just timed: at batch size 64
    a large model's convolutions with every engine's scratch memory would not fit at once."""
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _log(
    op: str, layer: Layer, jobs: dict[Any, Any], timed: dict[Any, Any], build: float, run: float
) -> None:
    log.info(
        "%s %s: %d variants, %d timed; %.2f s to set up, %.2f s to time",
        op, list(layer.input_shapes[0]) if layer.input_shapes else [], len(jobs), len(timed),
        build, run,
    )  # fmt: skip


Job = tuple[str, str]  # (variant, precision)


def _timed(
    torch: Any, jobs: dict[Job, LayerCall], task: BenchTask, heuristics: dict[str, str]
) -> dict[Job, Timed]:
    """Every variant timed: on a GPU the engines are screened first and only the fastest few
    of each precision are timed in full, beside torch's own call and the heuristic's choice
    (an engine that takes ten times the best costs seconds and could never be the bound)."""
    gpu = task.device.startswith("cuda")
    if gpu:
        jobs = _screened(torch, jobs, heuristics)
    labelled = {f"{variant}|{precision}": call for (variant, precision), call in jobs.items()}
    timed = time_gpu(torch, labelled, task.repeats) if gpu else time_cpu(labelled, task.repeats)
    return {tuple(label.split("|", 1)): value for label, value in timed.items()}  # type: ignore[misc]


def _screened(
    torch: Any, jobs: dict[Job, LayerCall], heuristics: dict[str, str]
) -> dict[Job, LayerCall]:
    kept: dict[Job, LayerCall] = {}
    for precision in sorted({p for _, p in jobs}):
        engines = {
            variant: call
            for (variant, p), call in jobs.items()
            if p == precision and "cudnn:" in variant
        }
        fastest = sorted(screen_gpu(torch, engines).items(), key=lambda item: item[1])
        chosen = {variant for variant, _ in fastest[:SCREEN_KEEP]}
        chosen |= {v for v in engines if v.endswith(f"cudnn:{heuristics.get(precision)}")}
        for (variant, p), call in jobs.items():
            if p == precision and (variant in chosen or "cudnn:" not in variant):
                kept[(variant, p)] = call
    return kept


def _entry(
    key: str,
    layer: Layer,
    device: str,
    stack: dict[str, str],
    timed: dict[Job, Timed],
    heuristics: dict[str, str],
    op: str | None = None,
) -> LayerBench:
    return LayerBench(
        key=key,
        op=op or layer.op,
        kind=layer.kind,
        input_shapes=[list(s) for s in layer.input_shapes],
        attributes=[list(a) for a in layer.attributes],
        device=device,
        libraries=stack,
        timings=[
            Timing(
                variant=variant,
                precision=precision,
                median_ms=round(t.median_ms, 6),
                min_ms=round(t.min_ms, 6),
                repeats=t.repeats,
            )
            for (variant, precision), t in sorted(timed.items())
        ],
        heuristic_engines=heuristics,
    )


def _precisions(layer: Layer, task: BenchTask) -> list[str]:
    if layer.kind in TENSOR_CORE_KINDS:
        return list(task.precisions)
    return [other_precision(task.model_precision)]


def other_precision(model_precision: str) -> str:
    """The precision that a model run at ``model_precision`` runs its layers other than
    convolutions and GEMMs at."""
    return model_precision if model_precision in HALF_PRECISIONS else "fp32"


def _dtype(torch: Any, precision: str) -> Any:
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)


def _math(torch: Any, precision: str, call: LayerCall) -> LayerCall:
    """``call`` with torch's TF32 switches set for ``precision`` on every call."""
    tf32 = precision == "tf32"

    def run() -> Any:
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        return call.run()

    return LayerCall(run, call.prime)


def _variants(
    torch: Any, graph: LayerGraph, layer: Layer, task: BenchTask
) -> tuple[dict[Job, LayerCall], dict[str, str]]:
    jobs: dict[Job, LayerCall] = {}
    heuristics: dict[str, str] = {}
    for precision in _precisions(layer, task):
        call = graph.isolate(layer, task.device, _dtype(torch, precision))
        jobs[("torch", precision)] = _math(torch, precision, call)
        if layer.kind == "conv" and task.device.startswith("cuda"):
            engines = _conv_engines(torch, layer, task.device, precision)
            for engine in engines:
                jobs[(f"cudnn:{engine.name}", precision)] = engine.call
            if engines:
                heuristics[precision] = min(engines, key=lambda e: e.heuristic_rank).name
    return _working(jobs), heuristics


def _fused_variants(
    torch: Any, graph: LayerGraph, conv: Layer, activation: str, task: BenchTask
) -> tuple[dict[Job, LayerCall], dict[str, str]]:
    jobs: dict[Job, LayerCall] = {}
    heuristics: dict[str, str] = {}
    if task.device.startswith("cuda"):
        for precision in task.precisions:
            engines = _conv_engines(torch, conv, task.device, precision, activation)
            for engine in engines:
                jobs[(f"fused:cudnn:{engine.name}", precision)] = engine.call
            if engines:
                heuristics[precision] = min(engines, key=lambda e: e.heuristic_rank).name
    else:
        x, w, b = _conv_tensors(torch, conv, task.device, torch.float32)
        attr, scalars = {"relu": ("relu", []), "relu6": ("hardtanh", [0.0, 6.0])}.get(
            activation, ("none", [])
        )
        args = (*_geometry(conv), int(conv.attribute("groups")))
        pointwise = torch.ops.mkldnn._convolution_pointwise
        jobs[("fused:onednn", "fp32")] = LayerCall(
            lambda: pointwise(x, w, b, *args, attr, scalars, ""), rewriting((x,))
        )
    return _working(jobs), heuristics


def _conv_tensors(torch: Any, conv: Layer, device: str, dtype: Any) -> tuple[Any, Any, Any]:
    x_shape, w_shape = conv.input_shapes[0], conv.input_shapes[1]
    x = torch.rand(x_shape, dtype=dtype, device=device)
    w = torch.rand(w_shape, dtype=dtype, device=device)
    b = torch.rand(w_shape[0], dtype=dtype, device=device)
    return x, w, b


def _conv_engines(
    torch: Any, conv: Layer, device: str, precision: str, activation: str | None = None
) -> list[Any]:
    from mlms.bounds.cudnn_engines import ConvCall, conv_engines

    x, w, b = _conv_tensors(torch, conv, device, _dtype(torch, precision))
    padding, stride, dilation = _geometry(conv)
    call = ConvCall(
        x, w, padding, stride, dilation,
        bias=b if activation is not None else None, activation=activation or "none",
    )  # fmt: skip
    return conv_engines(torch, call, precision)


def _geometry(conv: Layer) -> tuple[list[int], list[int], list[int]]:
    """A convolution layer's padding, stride and dilation."""
    return tuple(  # type: ignore[return-value]
        [int(v) for v in conv.attribute(key)] for key in ("padding", "stride", "dilation")
    )


def _working(jobs: dict[Job, LayerCall]) -> dict[Job, LayerCall]:
    """The jobs that run: an engine cuDNN built may still refuse at launch."""
    working = {}
    for job, call in jobs.items():
        try:
            call.run()
        except Exception:  # a variant that cannot run is no variant
            continue
        working[job] = call
    return working


def library_stack(torch: Any, device: str) -> dict[str, str]:
    """The versions a layer's time depends on (part of the perfdb key)."""
    stack = {"torch": torch.__version__}
    if device.startswith("cuda"):
        stack |= {"cuda": str(torch.version.cuda), "cudnn": str(torch.backends.cudnn.version())}
        try:
            import cudnn

            stack["cudnn_frontend"] = str(getattr(cudnn, "__version__", "unknown"))
        except ImportError:
            pass
    else:
        stack["threads"] = str(torch.get_num_threads())
    return stack


def device_label(torch: Any, device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    from mlms.hardware import detect

    return detect().cpu_brand
