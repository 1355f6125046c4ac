"""The evaluation loop (docs/DESIGN.md, "Leveled measurement" and "Measurement rules").

Per batch size: an untraced warm-up, then one measured run per level up to the requested one.
Run k enables collectors up to level k only, so the model latency always comes from a run with
no profiler attached; every other run reports its slowdown against it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import platform
import sys
import uuid
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import SpanProcessor

import mlms
from mlms import hardware
from mlms.assets.manager import Asset, AssetManager
from mlms.config import mlms_home
from mlms.errors import InvalidArgument
from mlms.evaluation.dataset_run import DatasetInputs, Pass, TopK
from mlms.evaluation.device_lock import exclusive_device, free_gpus
from mlms.evaluation.energy import energy_meter
from mlms.evaluation.feed import host_batch, placement
from mlms.evaluation.inputs import InputSource, dataset_split, input_spec, open_inputs
from mlms.evaluation.measure import measure_batch
from mlms.evaluation.option_checks import check_device_options
from mlms.evaluation.plan import EvaluationPlan, checked_plan, plan_evaluation
from mlms.evaluation.progress import ProgressCallback
from mlms.evaluation.record import (
    Accuracy,
    BatchResult,
    EnergyResult,
    EvaluationRecord,
    EvaluationRequest,
    FrameworkRef,
    ModelRef,
    Predictions,
    RankResult,
)
from mlms.evaluation.record_store import RecordIndex, save_record, stored_winner
from mlms.library_errors import library_failures
from mlms.manifest import ModelManifest
from mlms.predictors.base import Predictor, PredictorOptions
from mlms.store.base import ObjectStore
from mlms.tracer.archive import to_table, write_table
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer

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


def leveled_runs(level: TraceLevel, device: str, *, layers: bool = True) -> list[TraceLevel]:
    """The runs for a requested level: the model level first, then one per collected level;
    without ``layers`` (a compiled graph that has none) no framework run."""
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
    kept = [lv for lv in available if lv <= level and (layers or lv != TraceLevel.FRAMEWORK)]
    return [TraceLevel.MODEL, *kept]


def evaluate(
    planned: EvaluationPlan | EvaluationRequest,
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

    ``planned``: the plan its caller made (``mlms.evaluation.plan``), or a request to plan here.
    ``evaluation_id`` is given by a server that dispatches the evaluation, so that a retry on
    another agent keeps the id the client was told. The record's id is claimed in ``index``
    before the record is stored: a copy that finds it claimed (another agent finished the same
    evaluation first) discards its span archive and answers with the first copy's record."""
    plan = planned if isinstance(planned, EvaluationPlan) else plan_evaluation(planned, store)
    request = plan.request
    setup = _setup(plan, store)
    evaluation_id = evaluation_id or uuid.uuid4().hex
    tracer = Tracer(
        request.trace_level,
        resource={
            "mlms.evaluation_id": evaluation_id,
            "mlms.model": plan.manifest.name,
            "mlms.framework": plan.framework,
            "host.name": setup.info.host,
        },
        processors=processors,
        parent=parent,
    )
    report = progress or (lambda _event: None)
    with library_failures(f"{plan.manifest.name} on {plan.framework}"):
        if len(setup.devices) > 1:
            measured, ranks, spans = _measure_split(setup, request, tracer, evaluation_id, report)
        else:
            measured, ranks = _measure_all(setup, request, store, tracer, evaluation_id, report), []
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
        hardware=setup.info,
        device=setup.device,
        gpus=hardware.gpus_of(setup.devices, setup.info),
        ranks=ranks,
        software=_software(plan.framework, plan.framework_version),
        settings={
            **measured.settings,
            "input": setup.bound.described if setup.bound is not None else setup.source.name,
            "warmup": request.warmup,
            "min_seconds": request.min_seconds,
        },
        trace_level=request.trace_level.label,
        trace_id=trace_id,
        trace_archive=archive,
        span_count=spans.num_rows,
        queue_wait_seconds=round(measured.waited, 6),
        asset_sha256=setup.asset.sha256,
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
class _Setup:
    """Where and on what this host runs a plan, made ready before the device is taken."""

    plan: EvaluationPlan
    info: hardware.HardwareInfo
    devices: list[str]  # one, or a split model's, rank by rank
    runs: list[TraceLevel]
    source: InputSource
    bound: BoundDataset | None  # the data set the request names, checked against the model
    asset: Asset
    options: PredictorOptions

    @property
    def device(self) -> str:
        """The device this process runs on (a split model's first rank's)."""
        return self.devices[0]


def _setup(plan: EvaluationPlan, store: ObjectStore) -> _Setup:
    """The devices, leveled runs, inputs, asset and predictor options of ``plan`` on this
    host; an option the device cannot take fails here, before any asset is built or loaded."""
    request = plan.request
    info = hardware.detect()
    # --hw h100: a free H100 of the host (its lock not held), else one to queue on.
    free = free_gpus(mlms_home() / "locks")
    if request.tensor_parallel > 1:
        devices = hardware.resolve_group(request.hw, request.tensor_parallel, info, free=free)
    else:
        devices = [hardware.resolve(request.hw, info, free=free)]
    check_device_options(request, plan.predictor, devices[0])
    return _ready(
        plan,
        info,
        devices,
        _bound_dataset(store, request, plan.manifest),
        AssetManager(store, mlms_home() / "cache").ensure(plan.manifest, plan.framework),
    )


def _ready(
    plan: EvaluationPlan,
    info: hardware.HardwareInfo,
    devices: list[str],
    bound: BoundDataset | None,
    asset: Asset,
) -> _Setup:
    """The setup of checked choices: its input source and predictor options."""
    request = plan.request
    device = devices[0]
    return _Setup(
        plan=plan,
        info=info,
        devices=devices,
        runs=leveled_runs(
            request.trace_level, device, layers=plan.predictor.has_layers(plan.compile)
        ),
        source=open_inputs(
            plan.manifest, request.inputs, seed=request.seed, seq_len=request.seq_len
        ),
        bound=bound,
        asset=asset,
        options=PredictorOptions(
            device=device,
            intra_op_threads=request.intra_op_threads,
            inter_op_threads=request.inter_op_threads,
            precision=request.precision,
            compile=plan.compile,
            channels_last=request.channels_last,
            cudnn_benchmark=request.cudnn_benchmark,
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
    setup: _Setup,
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
    plan = setup.plan
    lock = nullcontext(0.0) if held else exclusive_device(mlms_home() / "locks", setup.device)
    with lock as waited, energy_meter(setup.device) as meter:
        with plan.predictor(plan.manifest, setup.asset.path, setup.options) as predictor:
            data = _dataset_inputs(store, setup.bound, predictor)
            with tracer.span(
                root,
                TraceLevel.APPLICATION,
                attributes={"mlms.evaluation_id": evaluation_id},
            ) as root_span:
                trace_id = f"{root_span.get_span_context().trace_id:032x}" if root_span else None
                try:
                    measured = [
                        measure_batch(
                            predictor,
                            setup.source,
                            data,
                            tracer,
                            request,
                            setup.runs,
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
                        predictions = _predictions(predictor, setup.source, request)
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
    plan = checked_plan(request, manifest, (cls.framework, cls.framework_version()), cls)
    setup = _ready(plan, hardware.detect(), [device], None, asset)
    return _measure_all(
        setup, request, None, tracer, evaluation_id, report, root=f"rank {rank}", held=True
    )


def _measure_split(
    setup: _Setup,
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
        waited = sum(held.enter_context(exclusive_device(locks, d)) for d in set(setup.devices))
        with tracer.span(
            "evaluation", TraceLevel.APPLICATION, attributes={"mlms.evaluation_id": evaluation_id}
        ):
            spec = RankSpec(
                request=request,
                manifest=setup.plan.manifest,
                asset=dataclasses.asdict(setup.asset) | {"path": str(setup.asset.path)},
                devices=setup.devices,
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
            gpu=hardware.gpu_of_device(device, setup.info),
            queue_wait_seconds=round(waited, 6),
            peak_memory_bytes=peak,
            energy=[result.energy or EnergyResult() for result in each.results],
        )
        for rank, (device, each, peak) in enumerate(
            zip(setup.devices, measured, peaks, strict=True)
        )
    ]
    first = measured[0]
    results = [
        result.model_copy(update={"energy": _total_energy(setup.devices, energies)})
        for result, *energies in zip(first.results, *(m.results for m in measured), strict=True)
    ]
    merged = dataclasses.replace(
        first, results=results, settings=first.settings | {"devices": setup.devices}, waited=waited
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
