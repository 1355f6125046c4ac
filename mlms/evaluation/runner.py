"""The evaluation loop (docs/DESIGN.md, "Leveled measurement" and "Measurement rules").

Per batch size: an untraced warm-up, then one measured run per level up to the requested one.
Run k enables collectors up to level k only, so the model latency always comes from a run with
no profiler attached; every other run reports its slowdown against it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import platform
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import SpanProcessor

import mlms
from mlms import hardware
from mlms.config import mlms_home
from mlms.errors import InvalidArgument
from mlms.evaluation.dataset_run import DatasetInputs, Pass, TopK, run_pass
from mlms.evaluation.device_lock import exclusive_device, free_gpus
from mlms.evaluation.energy import EnergyMeter, energy_meter
from mlms.evaluation.feed import Feed, host_batch, placement
from mlms.evaluation.inputs import InputSource, dataset_split, input_spec, open_inputs
from mlms.evaluation.options import check_options, compile_mode
from mlms.evaluation.progress import Progress, ProgressCallback
from mlms.evaluation.record import (
    Accuracy,
    BatchResult,
    EnergyResult,
    EvaluationRecord,
    EvaluationRequest,
    FrameworkRef,
    GenerationResult,
    InputCopyResult,
    LevelResult,
    ModelRef,
    Predictions,
    RankResult,
)
from mlms.evaluation.records import RecordIndex, save_record, stored_winner
from mlms.evaluation.stats import latency_stats
from mlms.library_errors import library_failures
from mlms.predictors.base import InputCopy, Predictor, PredictorOptions, TokenGenerator
from mlms.predictors.registry import choose_framework, predictor_class
from mlms.store.base import ObjectStore
from mlms.tracer.archive import to_table, write_table
from mlms.tracer.gpu_run import gpu_run
from mlms.tracer.hierarchy import innermost_containers
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer
from mlms.zoo.assets import Asset, AssetManager
from mlms.zoo.manifest import ModelManifest
from mlms.zoo.resolve import resolve_model

if TYPE_CHECKING:
    import pyarrow as pa

    from mlms.datasets.binding import BoundDataset

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
    plan = _plan(request, store)
    evaluation_id = evaluation_id or uuid.uuid4().hex
    tracer = Tracer(
        request.trace_level,
        resource={
            "mlms.evaluation_id": evaluation_id,
            "mlms.model": plan.manifest.name,
            "mlms.framework": plan.framework,
            "host.name": plan.info.host,
        },
        processors=processors,
        parent=parent,
    )
    report = progress or (lambda _event: None)
    with library_failures(f"{plan.manifest.name} on {plan.framework}"):
        if len(plan.devices) > 1:
            measured, ranks, spans = _measure_split(plan, request, tracer, evaluation_id, report)
        else:
            measured, ranks = _measure_all(plan, request, store, tracer, evaluation_id, report), []
    tracer.shutdown()
    trace_id = measured.trace_id
    if not ranks:
        spans = to_table(tracer.records())
    archive = write_table(store, trace_id, spans) if trace_id else None
    record = EvaluationRecord(
        id=evaluation_id,
        created_at=datetime.now(UTC),
        request=request,
        model=ModelRef(
            name=plan.manifest.name,
            version=plan.manifest.version,
            origin=plan.manifest.origin,
            source=request.model if plan.manifest.origin in ("file", "hub") else "",
        ),
        framework=FrameworkRef(name=plan.framework, version=plan.framework_version),
        hardware=plan.info,
        device=plan.device,
        gpus=hardware.gpus_of(plan.devices, plan.info),
        ranks=ranks,
        software=_software(plan.framework, plan.framework_version),
        settings={
            **measured.settings,
            "input": plan.bound.described if plan.bound is not None else plan.source.name,
            "warmup": request.warmup,
            "min_seconds": request.min_seconds,
        },
        trace_level=request.trace_level.label,
        trace_id=trace_id,
        trace_archive=archive,
        span_count=spans.num_rows,
        queue_wait_seconds=round(measured.waited, 6),
        asset_sha256=plan.asset.sha256,
        results=measured.results,
        accuracy=measured.accuracy,
        predictions=measured.predictions,
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


@dataclass(frozen=True)
class _Plan:
    """What an evaluation runs, checked and made ready before the device is taken."""

    manifest: ModelManifest
    framework: str
    framework_version: str
    info: hardware.HardwareInfo
    devices: list[str]  # one, or a split model's, rank by rank
    runs: list[TraceLevel]
    cls: type[Predictor]
    source: InputSource
    bound: BoundDataset | None  # the data set the request names, checked against the model
    asset: Asset
    options: PredictorOptions

    @property
    def device(self) -> str:
        """The device this process runs on (a split model's first rank's)."""
        return self.devices[0]


def _plan(request: EvaluationRequest, store: ObjectStore) -> _Plan:
    """The framework, devices, leveled runs, inputs, asset and predictor options of
    ``request``; a bad option fails here, before any asset is built or loaded."""
    manifest = resolve_model(request.model, store, input_shapes=request.input_shapes)
    framework, framework_version = choose_framework(manifest, request.framework)
    info = hardware.detect()
    # --hw h100: a free H100 of the host (its lock not held), else one to queue on.
    free = free_gpus(mlms_home() / "locks")
    if request.tensor_parallel > 1:
        from mlms.evaluation.tensor_parallel import check_split_request
        from mlms.predictors.tensor_parallel import SplitTorchPredictor, check_split_model

        check_split_request(request, framework)
        devices = hardware.resolve_group(request.hw, request.tensor_parallel, info, free=free)
        cls: type[Predictor] = SplitTorchPredictor
        check_split_model(manifest, request.tensor_parallel)
    else:
        devices = [hardware.resolve(request.hw, info, free=free)]
        cls = predictor_class(framework)
    check_options(request, manifest, cls, devices[0])
    return _ready(
        request,
        manifest,
        (framework, framework_version),
        info,
        devices,
        cls,
        _bound_dataset(store, request, manifest),
        AssetManager(store, mlms_home() / "cache").ensure(manifest, framework),
    )


def _ready(
    request: EvaluationRequest,
    manifest: ModelManifest,
    framework: tuple[str, str],
    info: hardware.HardwareInfo,
    devices: list[str],
    cls: type[Predictor],
    bound: BoundDataset | None,
    asset: Asset,
) -> _Plan:
    """The plan of checked choices: its input source and predictor options."""
    device = devices[0]
    return _Plan(
        manifest=manifest,
        framework=framework[0],
        framework_version=framework[1],
        info=info,
        devices=devices,
        runs=leveled_runs(request.trace_level, device),
        cls=cls,
        source=open_inputs(manifest, request.inputs, seed=request.seed, seq_len=request.seq_len),
        bound=bound,
        asset=asset,
        options=PredictorOptions(
            device=device,
            intra_op_threads=request.intra_op_threads,
            inter_op_threads=request.inter_op_threads,
            precision=request.precision,
            compile=compile_mode(request, cls),
            channels_last=request.channels_last,
        ),
    )


@dataclass(frozen=True)
class _Measured:
    trace_id: str | None
    results: list[BatchResult]
    accuracy: Accuracy | None
    predictions: Predictions | None
    settings: dict[str, object]  # the predictor's, with the input placement
    waited: float  # seconds in the device's queue

    def to_json(self) -> dict[str, Any]:
        """What a rank process hands its launcher."""
        return {
            "trace_id": self.trace_id,
            "results": [result.model_dump(mode="json") for result in self.results],
            "accuracy": self.accuracy.model_dump(mode="json") if self.accuracy else None,
            "predictions": self.predictions.model_dump(mode="json") if self.predictions else None,
            "settings": self.settings,
            "waited": self.waited,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Measured:
        return cls(
            trace_id=data["trace_id"],
            results=[BatchResult.model_validate(result) for result in data["results"]],
            accuracy=Accuracy.model_validate(data["accuracy"]) if data["accuracy"] else None,
            predictions=Predictions.model_validate(data["predictions"])
            if data["predictions"]
            else None,
            settings=data["settings"],
            waited=data["waited"],
        )


def _measure_all(
    plan: _Plan,
    request: EvaluationRequest,
    store: ObjectStore | None,
    tracer: Tracer,
    evaluation_id: str,
    report: ProgressCallback,
    *,
    root: str = "evaluation",
    held: bool = False,
) -> _Measured:
    """The measured part, holding the device (unless the caller ``held`` it already): every
    batch size's leveled runs, accuracy and predictions, under one ``root`` span."""
    lock = nullcontext(0.0) if held else exclusive_device(mlms_home() / "locks", plan.device)
    with lock as waited, energy_meter(plan.device) as meter:
        with plan.cls(plan.manifest, plan.asset.path, plan.options) as predictor:
            data = _dataset_inputs(store, plan.bound, predictor)
            with tracer.span(
                root,
                TraceLevel.APPLICATION,
                attributes={"mlms.evaluation_id": evaluation_id},
            ) as root_span:
                trace_id = f"{root_span.get_span_context().trace_id:032x}" if root_span else None
                try:
                    measured = [
                        _measure_batch(
                            predictor,
                            plan.source,
                            data,
                            tracer,
                            request,
                            plan.runs,
                            batch_size,
                            report,
                            meter,
                        )
                        for batch_size in request.batch_sizes
                    ]
                    results = [result for result, _ in measured]
                    if data is not None:
                        accuracy = _dataset_accuracy(data.bound, measured[0][1])
                        predictions = _dataset_predictions(predictor, data, request)
                    else:
                        accuracy = _accuracy(predictor, plan.manifest, max(request.batch_sizes))
                        predictions = _predictions(predictor, plan.source, request)
                finally:
                    if data is not None:
                        data.close()
            settings = predictor.settings()
            settings["input_placement"] = placement(predictor, request.input_on_device)
    return _Measured(trace_id, results, accuracy, predictions, settings, waited)


def measure_rank(
    request: EvaluationRequest,
    manifest: ModelManifest,
    asset: Asset,
    device: str,
    rank: int,
    tracer: Tracer,
    evaluation_id: str,
    report: ProgressCallback,
) -> _Measured:
    """One rank's measured part of a split model, in a rank process whose process group is set
    up (``mlms.evaluation.tensor_parallel_rank``); its launcher holds the devices."""
    from mlms.predictors.tensor_parallel import SplitTorchPredictor

    cls = SplitTorchPredictor
    plan = _ready(
        request,
        manifest,
        (cls.framework, cls.framework_version()),
        hardware.detect(),
        [device],
        cls,
        None,
        asset,
    )
    return _measure_all(
        plan, request, None, tracer, evaluation_id, report, root=f"rank {rank}", held=True
    )


def _measure_split(
    plan: _Plan,
    request: EvaluationRequest,
    tracer: Tracer,
    evaluation_id: str,
    report: ProgressCallback,
) -> tuple[_Measured, list[RankResult], pa.Table]:
    """A split model's measured part: its devices held here while its ranks run, one process
    each, under this process's root span; their results merged and their spans in one table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mlms.evaluation.tensor_parallel import RankSpec, free_port, running_ranks
    from mlms.tracer.carrier import context_pairs

    with contextlib.ExitStack() as held:
        locks = mlms_home() / "locks"
        waited = sum(held.enter_context(exclusive_device(locks, d)) for d in set(plan.devices))
        with tracer.span(
            "evaluation", TraceLevel.APPLICATION, attributes={"mlms.evaluation_id": evaluation_id}
        ):
            spec = RankSpec(
                request=request,
                manifest=plan.manifest,
                asset=dataclasses.asdict(plan.asset) | {"path": str(plan.asset.path)},
                devices=plan.devices,
                port=free_port(),
                evaluation_id=evaluation_id,
                context=context_pairs(),
            )
            with running_ranks(spec, report) as outputs:
                measured = [_Measured.from_json(o.results["measured"]) for o in outputs]
                spans = [pq.read_table(o.spans) for o in outputs]
                peaks = [o.results["peak_memory_bytes"] for o in outputs]
    ranks = [
        RankResult(
            rank=rank,
            device=device,
            gpu=hardware.gpu_of_device(device, plan.info),
            queue_wait_seconds=round(waited, 6),
            peak_memory_bytes=peak,
            energy=[result.energy or EnergyResult() for result in each.results],
        )
        for rank, (device, each, peak) in enumerate(zip(plan.devices, measured, peaks, strict=True))
    ]
    first = measured[0]
    results = [
        result.model_copy(update={"energy": _total_energy(plan.devices, energies)})
        for result, *energies in zip(first.results, *(m.results for m in measured), strict=True)
    ]
    merged = dataclasses.replace(
        first, results=results, settings=first.settings | {"devices": plan.devices}, waited=waited
    )
    return merged, ranks, pa.concat_tables([to_table(tracer.records()), *spans])


def _total_energy(devices: list[str], results: list[BatchResult]) -> EnergyResult | None:
    """A batch size's energy over every rank: the GPUs' counters summed; on the CPU rank 0's,
    whose package counter covers every rank's cores already."""
    first = results[0].energy
    measured = [result.energy for result in results if result.energy is not None]
    if devices[0] == "cpu" or len(measured) < len(results) or first is None:
        return first
    if any(e.joules is None or e.joules_per_inference is None for e in measured):
        return first
    joules = sum(e.joules or 0.0 for e in measured)
    per_inference = sum(e.joules_per_inference or 0.0 for e in measured)
    return first.model_copy(
        update={
            "joules": joules,
            "joules_per_inference": per_inference,
            "inferences_per_joule": 1 / per_inference,
            "average_watts": _total(e.average_watts for e in measured),
            "peak_watts": _total(e.peak_watts for e in measured),
            "idle_watts": _total(e.idle_watts for e in measured),
            "power_samples": sum(e.power_samples for e in measured),
        }
    )


def _total(values: Iterable[float | None]) -> float | None:
    """The sum, or None where any rank's is unknown."""
    numbers = list(values)
    return None if None in numbers else sum(n for n in numbers if n is not None)


def _bound_dataset(
    store: ObjectStore, request: EvaluationRequest, manifest: ModelManifest
) -> BoundDataset | None:
    """The request's data set, checked against the model before anything is loaded."""
    if request.dataset is None:
        return None
    if request.inputs != ["synthetic"]:
        raise InvalidArgument(
            f"--dataset {request.dataset!r} and --input {' '.join(request.inputs)!r}: a data set "
            "is the input; expected one or the other"
        )
    if request.input_on_device or request.generate is not None:
        flag = "--input-on-device" if request.input_on_device else "--generate"
        raise InvalidArgument(
            f"--dataset {request.dataset!r} streams its samples through the pipeline; {flag} "
            "runs on fixed inputs: expected one or the other"
        )
    from mlms.datasets.binding import bind
    from mlms.datasets.index import load_index

    index, sha256 = load_index(store, request.dataset)
    return bind(index, sha256, manifest, input_spec(manifest, request.seq_len))


def _dataset_inputs(
    store: ObjectStore, bound: BoundDataset | None, predictor: Predictor
) -> DatasetInputs | None:
    if bound is None:
        return None
    from mlms.datasets.stream import DatasetStream

    stream = DatasetStream(store, bound.index, mlms_home() / "cache")
    return DatasetInputs(bound, stream, predictor)


def _dataset_accuracy(bound: BoundDataset, first: Pass | None) -> Accuracy | None:
    """Top-1/top-5 of the first batch size's pass (every pass sees the same samples)."""
    if first is None:
        return None
    return first.hits.accuracy(
        bound.index.name, dataset_version=bound.index.version, dataset_sha256=bound.sha256
    )


def _measure_batch(
    predictor: Predictor,
    source: InputSource,
    data: DatasetInputs | None,
    tracer: Tracer,
    request: EvaluationRequest,
    runs: list[TraceLevel],
    batch_size: int,
    report: ProgressCallback,
    meter: EnergyMeter,
) -> tuple[BatchResult, Pass | None]:
    """One batch size's runs, on the input source or, where given, passes over the data set
    (the model-level run's pass is returned with the result)."""
    with tracer.span(
        f"batch_size={batch_size}",
        TraceLevel.APPLICATION,
        attributes={"mlms.batch_size": batch_size},
    ):
        feed = Feed(predictor, source, batch_size, on_device=request.input_on_device)
        # Untraced, uncounted warm-up.
        with tracer.run(0, TraceLevel.NO_TRACE):
            if data is not None:
                run_pass(
                    predictor,
                    data,
                    tracer,
                    batch_size,
                    limit=request.warmup,
                    report=lambda done, _t: report(
                        Progress(batch_size, "warmup", done, request.warmup)
                    ),
                )
            else:
                for index in range(request.warmup):
                    # The whole pipeline: post-processing has its own first-call costs (a
                    # detector's anchors) that a measured iteration must not carry.
                    predictor.postprocess(predictor.predict(feed.next(index, tracer)))
                    report(Progress(batch_size, "warmup", index + 1, request.warmup))
        passes: list[Pass] = []

        def loop(level: TraceLevel, number: int) -> tuple[list[int], float]:
            if data is None:
                return measure_loop(predictor, feed, tracer, request, batch_size, level, report)
            done = run_pass(
                predictor,
                data,
                tracer,
                batch_size,
                limit=None if number == 1 else request.iterations,
                report=lambda d, t: report(Progress(batch_size, level.label, d, t)),
            )
            passes.append(done)
            return done.latencies, done.seconds

        def first_batch() -> np.ndarray:
            if data is None:
                return host_batch(predictor, source.take(0, batch_size))
            return data.first(batch_size)[0]

        levels: dict[str, LevelResult] = {}
        model_run: tuple[list[int], float] | None = None
        copies: list[InputCopy] = []
        for number, level in enumerate(runs, start=1):
            # Everything but the loop happens before the run's span opens, so that the span
            # starts with its loop (min_seconds is measured from the loop's start).
            before = len(tracer.records())
            run_loop = functools.partial(loop, level, number)
            with (
                meter.measure() as energy,
                tracer.run(number, level),
                tracer.span(
                    f"run {number}: {level.label}",
                    TraceLevel.APPLICATION,
                    attributes={"mlms.run_level": level.label},
                ),
            ):
                latencies, seconds, dropped = _run(
                    predictor, tracer, request, level, run_loop, first_batch
                )
                spans = len(tracer.records()) - before
            if model_run is None:
                model_run = (latencies, seconds)
                copies = list(passes[0].copies if passes else feed.copies)
                inferences = passes[0].hits.samples if passes else batch_size * len(latencies)
                model_energy = energy.result(inferences)
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
    full_pass = passes[0] if passes else None
    result = BatchResult(
        batch_size=batch_size,
        iterations=len(latencies),
        seconds=seconds,
        latency_ms=latency_stats(latencies),
        # A data set's pass: every sample over the pass's wall time, pipeline stalls included.
        throughput=full_pass.hits.samples / seconds
        if full_pass is not None
        else batch_size * len(latencies) / (sum(latencies) / 1e9),
        levels=levels,
        input_copy=_copy_result(copies),
        generation=generation,
        energy=model_energy,
        samples=full_pass.hits.samples if full_pass is not None else None,
    )
    return result, full_pass


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
    first, later = predictor.ranks.slowest(first), predictor.ranks.slowest(later)
    decoding_s = (sum(first) + sum(later)) / 1e9
    return GenerationResult(
        new_tokens=new_tokens,
        time_to_first_token_ms=latency_stats(first),
        time_per_output_token_ms=latency_stats(later) if later else None,
        tokens_per_second=batch_size * new_tokens * request.iterations / decoding_s,
    )


def _run(
    predictor: Predictor,
    tracer: Tracer,
    request: EvaluationRequest,
    level: TraceLevel,
    loop: Callable[[], tuple[list[int], float]],
    first_batch: Callable[[], np.ndarray],
) -> tuple[list[int], float, int]:
    """One measured run of ``loop`` (latencies in ns, wall seconds), with the collectors of
    ``level`` attached; ``first_batch`` is what a GPU run replays for its counters."""
    if level < TraceLevel.FRAMEWORK:
        latencies, seconds = loop()
        return latencies, seconds, 0
    first = len(tracer.records())
    gpu = gpu_run(predictor, level, first_batch(), request.warmup)
    with predictor.profile_layers() as capture, gpu or nullcontext():
        latencies, seconds = loop()
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
    # A split model's ranks agree on every iteration (the slowest rank's clock decides).
    while predictor.ranks.agree(index < request.iterations or clock() < deadline):
        batch = feed.next(index, tracer)
        with tracer.span("predict", TraceLevel.APPLICATION):
            with tracer.span(
                "model", TraceLevel.MODEL, kind="model", attributes={"mlms.batch_size": batch_size}
            ):
                start = clock()
                logits = predictor.predict(batch)
                latencies.append(clock() - start)
        with tracer.span("postprocess", TraceLevel.APPLICATION):
            predictor.postprocess(logits, step=functools.partial(_step, tracer))
        index += 1
        report(Progress(batch_size, level.label, index, request.iterations))
    return predictor.ranks.slowest(latencies), (clock() - began) / 1e9


def _step(tracer: Tracer, name: str) -> AbstractContextManager[object]:
    """One post-processing step's span, inside the postprocess span."""
    return tracer.span(name, TraceLevel.APPLICATION)


def _accuracy(predictor: Predictor, manifest: ModelManifest, batch_size: int) -> Accuracy | None:
    """Top-1/top-5 over the model's built-in held-out split, untimed and untraced."""
    if manifest.dataset is None:
        return None
    images, labels = dataset_split(manifest)
    hits = TopK()
    for start in range(0, len(images), batch_size):
        batch = predictor.preprocess(list(images[start : start + batch_size]))
        best, _ = predictor.postprocess(predictor.predict(batch), k=5)
        hits.add(best, labels[start : start + batch_size])
    return hits.accuracy(f"{manifest.dataset.name}:{manifest.dataset.split}")


def _dataset_predictions(
    predictor: Predictor, data: DatasetInputs, request: EvaluationRequest
) -> Predictions:
    """Top-5 of the data set's first samples, as ``_predictions`` for an input source."""
    inputs, _labels = data.first(min(max(request.batch_sizes), PREDICTION_SAMPLES))
    best, probabilities = predictor.postprocess(predictor.predict(inputs), k=5)
    return Predictions(
        inputs=data.bound.described,
        top5=best.tolist(),
        probabilities=np.round(probabilities, 6).tolist(),
    )


def _predictions(
    predictor: Predictor, source: InputSource, request: EvaluationRequest
) -> Predictions:
    """Top-5 of the first ``PREDICTION_SAMPLES`` inputs (or more, to fill whole batches),
    untimed and untraced, in batches of the largest batch size up to that many: a shape the
    model has run already (a compiled model compiles nothing new), and enough inputs at batch
    size 1 for an agreement between two evaluations to mean something."""
    rows = min(max(request.batch_sizes), PREDICTION_SAMPLES)
    best, probabilities = [], []
    for index in range(-(-PREDICTION_SAMPLES // rows)):
        batch = host_batch(predictor, source.take(index, rows))
        top, chances = predictor.postprocess(predictor.predict(batch), k=5)
        best.append(top)
        probabilities.append(chances)
    return Predictions(
        inputs=f"{source.name} seed {request.seed}",
        top5=np.concatenate(best).tolist(),
        probabilities=np.round(np.concatenate(probabilities), 6).tolist(),
    )


#: Libraries that build the zoo's networks: their modules' names become the layer names, so a
#: record names the release that ran (any within pyproject.toml's range).
MODEL_LIBRARIES = ("torchvision", "timm", "transformers", "keras_hub")


def _software(framework: str, version: str) -> dict[str, str]:
    return {
        "mlms": mlms.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        framework: version,
        **{
            name: module.__version__
            for name in MODEL_LIBRARIES
            if (module := sys.modules.get(name)) is not None
        },
        "os": platform.platform(),
        "executable": sys.executable,
    }
