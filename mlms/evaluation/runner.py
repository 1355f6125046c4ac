"""The evaluation loop (DESIGN.md, "Leveled measurement" and "Measurement rules").

Per batch size: an untraced warm-up, then one measured run per level up to the requested one.
Run k enables collectors up to level k only, so the model latency always comes from a run with
no profiler attached; every other run reports its slowdown against it.
"""

from __future__ import annotations

import logging
import platform
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import SpanProcessor

import mlms
from mlms.config import mlms_home
from mlms.errors import InvalidArgument, UnknownEvaluation
from mlms.evaluation.device_lock import exclusive_device
from mlms.evaluation.feed import Feed, host_batch, placement
from mlms.evaluation.inputs import InputSource, dataset_split, open_inputs
from mlms.evaluation.options import check_options, compile_mode
from mlms.evaluation.record import (
    Accuracy,
    BatchResult,
    EvaluationRecord,
    EvaluationRequest,
    FrameworkRef,
    GenerationResult,
    InputCopyResult,
    LevelResult,
    ModelRef,
    Predictions,
)
from mlms.evaluation.records import RecordIndex, load_record, save_record, stored_winner
from mlms.evaluation.stats import latency_stats
from mlms.predictors.base import InputCopy, Predictor, PredictorOptions, TokenGenerator
from mlms.predictors.registry import choose_framework, predictor_class
from mlms.registry import hardware
from mlms.store.base import ObjectStore
from mlms.tracer.archive import write_spans
from mlms.tracer.gpu_run import gpu_run
from mlms.tracer.hierarchy import innermost_containers
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer
from mlms.zoo.assets import AssetManager
from mlms.zoo.catalog import get_model
from mlms.zoo.manifest import ModelManifest

log = logging.getLogger(__name__)

#: Inputs whose top-5 the record keeps (prediction divergence between evaluations).
PREDICTION_SAMPLES = 16
#: Levels that have a collector on this kind of device, beyond APPLICATION and MODEL spans.
COLLECTED_LEVELS = {
    "cpu": (TraceLevel.FRAMEWORK,),
    # ml_library: cuDNN calls; system_library: CUPTI API calls; hardware: + kernels and copies;
    # full: + ncu counters (mlms.tracer.gpu_run).
    "cuda": (
        TraceLevel.FRAMEWORK,
        TraceLevel.ML_LIBRARY,
        TraceLevel.SYSTEM_LIBRARY,
        TraceLevel.HARDWARE,
        TraceLevel.FULL,
    ),
}


@dataclass(frozen=True)
class Progress:
    batch_size: int
    run: str  # the level label of the run in progress, or "warmup"
    done: int
    target: int


ProgressCallback = Callable[[Progress], None]


def leveled_runs(level: TraceLevel, device: str) -> list[TraceLevel]:
    """The runs for a requested level: the model level first, then one per collected level."""
    if level <= TraceLevel.MODEL:
        return [level]
    kind = "cpu" if device == "cpu" else "cuda"
    available = COLLECTED_LEVELS.get(kind, ())
    deepest = max(available, default=TraceLevel.MODEL)
    if level > deepest and level != TraceLevel.FULL:
        raise InvalidArgument(
            f"trace level {level.label!r} has no collector on {device}: the deepest level "
            f"there is {deepest.label!r}"
            + (
                "; the GPU levels (ml_library, system_library, hardware) need --hw with a GPU"
                if kind == "cpu"
                else ""
            )
        )
    return [TraceLevel.MODEL, *(lv for lv in available if lv <= level)]


def evaluate(
    request: EvaluationRequest,
    *,
    store: ObjectStore,
    progress: ProgressCallback | None = None,
    processors: tuple[SpanProcessor, ...] = (),
    parent: otel_context.Context | None = None,
    agent: dict[str, str] | None = None,
    evaluation_id: str | None = None,
    index: RecordIndex | None = None,
) -> EvaluationRecord:
    """Run one evaluation in this process and store its record and span archive.

    ``evaluation_id`` is given by a server that dispatches the evaluation, so that a retry on
    another agent keeps the id the client was told. The record's id is claimed in ``index``
    before the record is stored: a copy that finds it claimed (another agent finished the same
    evaluation first) discards its span archive and answers with the first copy's record."""
    manifest = get_model(request.model)
    framework, framework_version = choose_framework(manifest, request.framework)
    info = hardware.detect()
    device = hardware.resolve(request.hw, info)
    runs = leveled_runs(request.trace_level, device)
    cls = predictor_class(framework)
    check_options(request, manifest, cls, device)
    source = open_inputs(manifest, request.inputs, seed=request.seed, seq_len=request.seq_len)
    asset = AssetManager(store, mlms_home() / "cache").ensure(manifest, framework)
    options = PredictorOptions(
        device=device,
        intra_op_threads=request.intra_op_threads,
        inter_op_threads=request.inter_op_threads,
        precision=request.precision,
        compile=compile_mode(request, cls),
        channels_last=request.channels_last,
    )
    dispatched = evaluation_id is not None
    evaluation_id = evaluation_id or uuid.uuid4().hex
    tracer = Tracer(
        request.trace_level,
        resource={
            "mlms.evaluation_id": evaluation_id,
            "mlms.model": manifest.name,
            "mlms.framework": framework,
            "host.name": info.host,
        },
        processors=processors,
        parent=parent,
    )
    report = progress or (lambda _event: None)
    with exclusive_device(mlms_home() / "locks", device) as waited:
        with cls(manifest, asset.path, options) as predictor:
            with tracer.span(
                "evaluation",
                TraceLevel.APPLICATION,
                attributes={"mlms.evaluation_id": evaluation_id},
            ) as root:
                trace_id = f"{root.get_span_context().trace_id:032x}" if root else None
                results = [
                    _measure_batch(predictor, source, tracer, request, runs, batch_size, report)
                    for batch_size in request.batch_sizes
                ]
                accuracy = _accuracy(predictor, manifest, max(request.batch_sizes))
                predictions = _predictions(predictor, source, request)
            settings = predictor.settings()
            settings["input_placement"] = placement(predictor, request.input_on_device)
    tracer.shutdown()
    if dispatched:
        stored = _stored_already(store, evaluation_id)
        if stored is not None:
            return stored
    records = tracer.records()
    archive = write_spans(store, trace_id, records) if trace_id else None
    record = EvaluationRecord(
        id=evaluation_id,
        created_at=datetime.now(UTC),
        request=request,
        model=ModelRef(name=manifest.name, version=manifest.version),
        framework=FrameworkRef(name=framework, version=framework_version),
        hardware=info,
        device=device,
        software=_software(framework, framework_version),
        settings={
            **settings,
            "input": source.name,
            "warmup": request.warmup,
            "min_seconds": request.min_seconds,
        },
        trace_level=request.trace_level.label,
        trace_id=trace_id,
        trace_archive=archive,
        span_count=len(records),
        queue_wait_seconds=round(waited, 6),
        asset_sha256=asset.sha256,
        results=results,
        accuracy=accuracy,
        predictions=predictions,
        agent=agent or {"mode": "embedded"},
    )
    if not save_record(store, record, index):
        if archive is not None:
            store.delete(archive)
        log.warning(
            "evaluation %s was stored by another copy first; this copy and its span archive "
            "are discarded",
            evaluation_id,
        )
        return stored_winner(store, evaluation_id)
    return record


def _stored_already(store: ObjectStore, evaluation_id: str) -> EvaluationRecord | None:
    """The record another agent stored under this id, if any.

    A server moves an evaluation to another agent when its agent stops answering (a network
    partition), while that agent, unaware, runs its copy to the end and stores it once the
    link is back: the later copy overwrote the record (and the span archive) of the one the
    client had been given. The first copy stored wins; a later one is dropped here, and the
    stored record is what this agent answers with.
    """
    try:
        stored = load_record(store, evaluation_id)
    except UnknownEvaluation:
        return None
    log.warning(
        "evaluation %s was completed by %s already; dropping this copy",
        evaluation_id,
        stored.agent.get("address") or stored.agent.get("mode"),
    )
    return stored


def _measure_batch(
    predictor: Predictor,
    source: InputSource,
    tracer: Tracer,
    request: EvaluationRequest,
    runs: list[TraceLevel],
    batch_size: int,
    report: ProgressCallback,
) -> BatchResult:
    with tracer.span(
        f"batch_size={batch_size}",
        TraceLevel.APPLICATION,
        attributes={"mlms.batch_size": batch_size},
    ):
        feed = Feed(predictor, source, batch_size, on_device=request.input_on_device)
        # Untraced, uncounted warm-up.
        with tracer.run(0, TraceLevel.NO_TRACE):
            for index in range(request.warmup):
                predictor.predict(feed.next(index, tracer))
                report(Progress(batch_size, "warmup", index + 1, request.warmup))
        levels: dict[str, LevelResult] = {}
        model_run: tuple[list[int], float] | None = None
        copies: list[InputCopy] = []
        for number, level in enumerate(runs, start=1):
            with (
                tracer.run(number, level),
                tracer.span(
                    f"run {number}: {level.label}",
                    TraceLevel.APPLICATION,
                    attributes={"mlms.run_level": level.label},
                ),
            ):
                before = len(tracer.records())
                latencies, seconds, dropped = _run(
                    predictor, feed, source, tracer, request, batch_size, level, report
                )
                spans = len(tracer.records()) - before
            if model_run is None:
                model_run, copies = (latencies, seconds), list(feed.copies)
            p50 = float(np.percentile(latencies, 50)) / 1e6
            base = float(np.percentile(model_run[0], 50)) / 1e6
            levels[level.label] = LevelResult(
                run=number,
                iterations=len(latencies),
                latency_ms={"p50": p50, "mean": float(np.mean(latencies)) / 1e6},
                overhead=p50 / base,
                spans=spans,
                dropped=dropped,
            )
        generation = None
        if request.generate is not None and isinstance(predictor, TokenGenerator):
            with tracer.run(0, TraceLevel.NO_TRACE):
                generation = _generation(predictor, feed, tracer, request, batch_size)
    latencies, seconds = model_run
    return BatchResult(
        batch_size=batch_size,
        iterations=len(latencies),
        seconds=seconds,
        latency_ms=latency_stats(latencies),
        throughput=batch_size * len(latencies) / (sum(latencies) / 1e9),
        levels=levels,
        input_copy=_copy_result(copies),
        generation=generation,
    )


def _copy_result(copies: list[InputCopy]) -> InputCopyResult | None:
    if not copies:
        return None
    seconds = [copy.seconds for copy in copies]
    median = float(np.median(seconds))
    return InputCopyResult(
        bytes=copies[0].bytes,
        latency_ms={"p50": median * 1e3, "mean": float(np.mean(seconds)) * 1e3},
        gb_per_s=copies[0].bytes / median / 1e9,
    )


def _generation(
    predictor: TokenGenerator,
    feed: Feed,
    tracer: Tracer,
    request: EvaluationRequest,
    batch_size: int,
) -> GenerationResult:
    """Untraced greedy decoding of ``request.generate`` tokens after each input: a warm-up,
    then ``request.iterations`` generations."""
    new_tokens = request.generate or 1
    for index in range(max(request.warmup, 1)):
        predictor.generate(feed.next(index, tracer), new_tokens)
    first: list[int] = []
    later: list[int] = []
    for index in range(request.iterations):
        ttft, steps = predictor.generate(feed.next(index, tracer), new_tokens)
        first.append(ttft)
        later.extend(steps)
    decoding_s = (sum(first) + sum(later)) / 1e9
    return GenerationResult(
        new_tokens=new_tokens,
        time_to_first_token_ms=latency_stats(first),
        time_per_output_token_ms=latency_stats(later) if later else None,
        tokens_per_second=batch_size * new_tokens * request.iterations / decoding_s,
    )


def _run(
    predictor: Predictor,
    feed: Feed,
    source: InputSource,
    tracer: Tracer,
    request: EvaluationRequest,
    batch_size: int,
    level: TraceLevel,
    report: ProgressCallback,
) -> tuple[list[int], float, int]:
    """One measured run: at least ``iterations`` predicts and at least ``min_seconds``."""
    if level < TraceLevel.FRAMEWORK:
        latencies, seconds = measure_loop(
            predictor, feed, tracer, request, batch_size, level, report
        )
        return latencies, seconds, 0
    first = len(tracer.records())
    gpu = gpu_run(
        predictor, level, host_batch(predictor, source.take(0, batch_size)), request.warmup
    )
    with predictor.profile_layers() as capture, gpu or nullcontext():
        latencies, seconds = measure_loop(
            predictor, feed, tracer, request, batch_size, level, report
        )
    models = [r for r in tracer.records()[first:] if r.level == TraceLevel.MODEL]
    parents = innermost_containers(models, capture.events)
    tracer.add_events(capture.events, [models[i] if i is not None else None for i in parents])
    dropped = gpu.emit(tracer, first) if gpu else 0
    return latencies, seconds, capture.dropped + dropped


def measure_loop(
    predictor: Predictor,
    feed: Feed,
    tracer: Tracer,
    request: EvaluationRequest,
    batch_size: int,
    level: TraceLevel,
    report: ProgressCallback,
) -> tuple[list[int], float]:
    """Predict until both the iteration count and the minimum time are met.

    Returns each predict's latency (ns, host clock around the call, which returns only once the
    device is done) and the run's wall time (s); ``feed.copies`` holds the run's input copies.
    """
    feed.clear()
    latencies: list[int] = []
    clock = time.perf_counter_ns
    began = clock()
    deadline = began + int(request.min_seconds * 1e9)
    index = 0
    while index < request.iterations or clock() < deadline:
        batch = feed.next(index, tracer)
        with tracer.span("predict", TraceLevel.APPLICATION):
            with tracer.span(
                "model", TraceLevel.MODEL, kind="model", attributes={"mlms.batch_size": batch_size}
            ):
                start = clock()
                logits = predictor.predict(batch)
                latencies.append(clock() - start)
        with tracer.span("postprocess", TraceLevel.APPLICATION):
            predictor.postprocess(logits)
        index += 1
        report(Progress(batch_size, level.label, index, request.iterations))
    return latencies, (clock() - began) / 1e9


def _accuracy(predictor: Predictor, manifest: ModelManifest, batch_size: int) -> Accuracy | None:
    """Top-1/top-5 over the model's whole held-out split, untimed and untraced."""
    if manifest.dataset is None:
        return None
    images, labels = dataset_split(manifest)
    top1 = top5 = 0
    for start in range(0, len(images), batch_size):
        batch = predictor.preprocess(list(images[start : start + batch_size]))
        best, _ = predictor.postprocess(predictor.predict(batch), k=5)
        truth = labels[start : start + batch_size, None]
        top1 += int((best[:, :1] == truth).sum())
        top5 += int((best == truth).any(axis=1).sum())
    return Accuracy(
        top1=top1 / len(images),
        top5=top5 / len(images),
        samples=len(images),
        dataset=f"{manifest.dataset.name}:{manifest.dataset.split}",
    )


def _predictions(
    predictor: Predictor, source: InputSource, request: EvaluationRequest
) -> Predictions:
    """Top-5 of the first inputs (the largest batch size, at most ``PREDICTION_SAMPLES``),
    untimed and untraced."""
    rows = min(max(request.batch_sizes), PREDICTION_SAMPLES)
    batch = host_batch(predictor, source.take(0, rows))
    best, probabilities = predictor.postprocess(predictor.predict(batch), k=5)
    return Predictions(
        inputs=f"{source.name} seed {request.seed}",
        top5=best.tolist(),
        probabilities=np.round(probabilities, 6).tolist(),
    )


def _software(framework: str, version: str) -> dict[str, str]:
    return {
        "mlms": mlms.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        framework: version,
        "os": platform.platform(),
        "executable": sys.executable,
    }
