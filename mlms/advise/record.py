"""The advice request and record (stored as ``advice/<id>.json``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlms.evaluation.precisions import check_precisions
from mlms.evaluation.record import (
    MAX_ITERATIONS,
    MAX_SECONDS,
    MAX_TENSOR_PARALLEL,
    MAX_THREADS,
    EvaluationRequest,
    check_batch_sizes,
)
from mlms.hardware import HardwareInfo
from mlms.store.base import ObjectStore
from mlms.store.json_records import JsonRecords

T = TypeVar("T")

PREFIX = "advice/"
#: What an objective measures, its unit, and whether less is better.
OBJECTIVES = {
    "latency": ("latency p50", "ms", True),
    "throughput": ("throughput", "inputs/s", False),
    "energy": ("energy", "J/inference", True),
}
#: The latency percentiles a record holds, for ``--percentile``.
PERCENTILES = (50.0, 90.0, 95.0, 99.0)
#: ``--compile`` value for "as the framework runs by default" (no compile mode asked for).
NO_COMPILE = "none"


class AdviceRequest(BaseModel):
    """What to advise on, the space to search (None: what the device and frameworks admit),
    the constraints and the time it may take."""

    model_config = ConfigDict(frozen=True)

    model: str
    hw: str = "cpu"
    objective: str = "latency"
    frameworks: list[str] | None = None
    precisions: list[str] | None = None
    #: Modes of each framework's ``--compile`` ("none": as it runs by default).
    compile_modes: list[str] | None = None
    #: None: both where it applies; True or False: only that.
    channels_last: bool | None = None
    #: CPU intra-op threads.
    threads: list[int] | None = None
    #: Throughput and energy objectives (the latency objective runs batch size 1).
    batch_sizes: list[int] | None = None
    #: A latency objective every recommended configuration must meet at ``percentile``.
    slo_ms: float | None = Field(default=None, gt=0, le=MAX_SECONDS * 1000, allow_inf_nan=False)
    percentile: float = 99.0
    #: Accuracy is checked on this data set (its task's headline metric against the fp32
    #: baseline's: top-1, mAP, mIoU, perplexity, BLEU), else as top-1 agreement with the fp32
    #: baseline on synthetic inputs.
    dataset: str | None = None
    #: Points of that metric a configuration may lose against the fp32 baseline
    #: (``mlms.evaluation.record.Accuracy.drop_from``).
    max_accuracy_drop: float = Field(default=0.5, ge=0, le=100, allow_inf_nan=False)
    #: Wall time of probes and verification together.
    budget_minutes: float = Field(default=10.0, gt=0, le=24 * 60, allow_inf_nan=False)
    #: The first round verifies the best predicted and, of the next this many - 1, those
    #: expected to gain more than the tolerance over it; each later round the this many best
    #: predicted of those expected to gain that much over the best achieved, while the budget
    #: lasts (``run.TOLERANCE``): on several devices, as many as run at once.
    verify: int = Field(default=1, ge=1, le=64)
    #: The verifying evaluations'.
    iterations: int = Field(default=20, ge=1, le=MAX_ITERATIONS)
    min_seconds: float = Field(default=1.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    #: The probes'.
    probe_iterations: int = Field(default=5, ge=1, le=MAX_ITERATIONS)
    probe_min_seconds: float = Field(default=0.2, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    #: Use stored evaluations of the model on this hardware as observations.
    use_stored: bool = True
    #: Every evaluation runs the model split over this many devices of ``hw``
    #: (``EvaluationRequest.tensor_parallel``): the space holds what a split runs.
    tensor_parallel: int = Field(default=1, ge=1, le=MAX_TENSOR_PARALLEL)

    @field_validator("objective")
    @classmethod
    def _objective(cls, value: str) -> str:
        if value not in OBJECTIVES:
            raise ValueError(f"objective {value!r}: expected one of {', '.join(OBJECTIVES)}")
        return value

    @field_validator("precisions")
    @classmethod
    def _precisions(cls, value: list[str] | None) -> list[str] | None:
        return check_precisions(value)

    @field_validator("frameworks", "compile_modes")
    @classmethod
    def _names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or any(not v.strip() for v in value)):
            raise ValueError(f"{value!r}: expected one or more names")
        return value

    @field_validator("threads")
    @classmethod
    def _threads(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (not value or any(not 1 <= t <= MAX_THREADS for t in value)):
            raise ValueError(f"threads {value}: expected counts from 1 to {MAX_THREADS}")
        return value

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else check_batch_sizes(value)

    @field_validator("percentile")
    @classmethod
    def _percentile(cls, value: float) -> float:
        if value not in PERCENTILES:
            raise ValueError(
                f"percentile {value:g}: expected one of {', '.join(f'{p:g}' for p in PERCENTILES)}"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AdviceRequest:
        if self.objective == "latency" and self.batch_sizes not in (None, [1]):
            raise ValueError(
                f"batch sizes {self.batch_sizes} with objective latency: the latency objective "
                "runs batch size 1; expected --objective throughput or energy"
            )
        # The dataset's name is checked as an evaluation request checks it.
        if self.dataset is not None:
            EvaluationRequest(model=self.model, dataset=self.dataset)
            if self.tensor_parallel > 1:
                raise ValueError(
                    f"--dataset with --tensor-parallel {self.tensor_parallel}: a split model "
                    "runs synthetic inputs; expected one or the other"
                )
        return self

    @property
    def unit(self) -> str:
        return OBJECTIVES[self.objective][1]

    @property
    def lower_is_better(self) -> bool:
        return OBJECTIVES[self.objective][2]


class Config(BaseModel):
    """One point of the space."""

    model_config = ConfigDict(frozen=True)

    framework: str
    precision: str = "fp32"
    compile: str | None = None
    channels_last: bool = False
    threads: int | None = None
    batch_size: int = 1

    def label(self) -> str:
        parts = [self.framework, self.precision]
        if self.compile is not None:
            parts.append(f"compile {self.compile}")
        if self.channels_last:
            parts.append("channels-last")
        if self.threads is not None:
            parts.append(f"{self.threads} threads")
        parts.append(f"bs {self.batch_size}")
        return ", ".join(parts)


def by_setting(items: Iterable[T], config: Callable[[T], Config]) -> list[list[T]]:
    """``items`` grouped by their configuration's settings, the batch size aside (first seen
    first), each group in batch-size order: what one evaluation measures, each batch size in
    a loop of its own."""
    groups: dict[Config, list[T]] = {}
    for item in items:
        groups.setdefault(config(item).model_copy(update={"batch_size": 1}), []).append(item)
    return [sorted(group, key=lambda item: config(item).batch_size) for group in groups.values()]


class Observation(BaseModel):
    """A measured configuration: a probe, a stored evaluation or a verifying one."""

    config: Config
    source: str  # probe, stored, verified
    evaluation_id: str
    value: float  # the objective, in the request's unit
    p50_ms: float  # the batch's median latency
    #: The latency at the request's percentile (ms).
    latency_ms: float
    #: The relative half-width of the measurement's 95% interval of the median.
    spread: float = 0.0
    seconds: float = 0.0  # wall time of the evaluation (0 for a stored one)
    #: The host's part of the batch's median predict (``BatchResult.launch_ms``), where the
    #: framework returns before the device is done.
    launch_ms: float | None = None
    #: The device's work alone (``BatchResult.device_ms``), where it was timed.
    device_ms: float | None = None


class AdviceRow(BaseModel):
    """A configuration's prediction and, when verified, what it achieved."""

    config: Config
    predicted: float
    low: float
    high: float
    #: What the prediction rests on: probed (measured directly), stored, model (effects
    #: multiplied), or measured (a space measured whole: no prediction, the interval the
    #: measurement's own).
    basis: str
    predicted_latency_ms: float
    #: Whether the prediction meets the latency SLO (None without one).
    meets_slo: bool | None = None
    achieved: float | None = None
    achieved_latency_ms: float | None = None
    evaluation_id: str | None = None
    #: |predicted - achieved| / achieved.
    error: float | None = None
    accuracy: str | None = None
    accuracy_holds: bool | None = None


class AdviceRecord(BaseModel):
    id: str
    created_at: datetime
    request: AdviceRequest
    model: str
    device: str
    device_name: str
    hardware: HardwareInfo
    frameworks: dict[str, str]  # name -> version
    space: int  # configurations
    left_out: list[str]
    evidence: list[str]
    observations: list[Observation]
    #: Every configuration, best predicted first.
    rows: list[AdviceRow]
    recommendation: AdviceRow | None
    why: str
    #: The fp32 baseline each framework's accuracy is checked against (evaluation ids).
    baselines: dict[str, str]
    probe_seconds: float
    verify_seconds: float
    seconds: float
    #: Over the verified rows: the median relative error, and the share achieved inside the
    #: predicted interval.
    median_error: float | None
    coverage: float | None


_RECORDS = JsonRecords(PREFIX, AdviceRecord, "advice")


def save_advice(store: ObjectStore, record: AdviceRecord) -> str:
    return _RECORDS.save(store, record)


def list_advice(store: ObjectStore) -> list[AdviceRecord]:
    return _RECORDS.all(store)
