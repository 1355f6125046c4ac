"""The evaluation request and record (stored as ``evaluations/<id>.json``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlms.registry.hardware import HardwareInfo
from mlms.tracer.levels import TraceLevel


class EvaluationRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    framework: str | None = None
    hw: str = "cpu"
    batch_sizes: list[int] = Field(default_factory=lambda: [1])
    iterations: int = Field(default=20, ge=1)
    warmup: int = Field(default=3, ge=0)
    min_seconds: float = Field(default=1.0, ge=0)
    trace_level: TraceLevel = TraceLevel.MODEL
    #: "synthetic", "dataset", or image paths.
    inputs: list[str] = Field(default_factory=lambda: ["synthetic"])
    intra_op_threads: int | None = Field(default=None, ge=1)
    inter_op_threads: int | None = Field(default=None, ge=1)
    seed: int = 0

    @field_validator("batch_sizes")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(b < 1 for b in value):
            raise ValueError(f"batch sizes must be positive integers, got {value}")
        return value

    @field_validator("trace_level", mode="before")
    @classmethod
    def _level(cls, value: object) -> TraceLevel:
        return TraceLevel.parse(value)  # type: ignore[arg-type]


class LatencyStats(BaseModel):
    """Milliseconds."""

    p50: float
    p90: float
    p95: float
    p99: float
    mean: float
    min: float
    max: float
    trimmed_mean: float
    stdev: float
    median_ci95: tuple[float, float]
    #: Set when the spread is too wide to trust the numbers; says why.
    warning: str | None = None


class LevelResult(BaseModel):
    """One leveled run: its own latency and its slowdown against the model-level run."""

    run: int
    iterations: int
    latency_ms: dict[str, float]  # {"p50": ..., "mean": ...}
    overhead: float  # p50 of this run / p50 of the model-level run
    spans: int
    dropped: int = 0


class BatchResult(BaseModel):
    batch_size: int
    iterations: int
    seconds: float
    latency_ms: LatencyStats
    throughput: float  # inputs per second
    levels: dict[str, LevelResult] = {}


class Accuracy(BaseModel):
    top1: float
    top5: float
    samples: int
    dataset: str


class Predictions(BaseModel):
    """The top-5 classes and their probabilities for the first inputs of the input source,
    so that two evaluations can be checked for diverging predictions."""

    inputs: str  # the input source and seed: only predictions of the same inputs compare
    top5: list[list[int]]
    probabilities: list[list[float]]


class ModelRef(BaseModel):
    name: str
    version: str


class FrameworkRef(BaseModel):
    name: str
    version: str


class EvaluationRecord(BaseModel):
    id: str
    created_at: datetime
    status: Literal["completed", "failed"] = "completed"
    request: EvaluationRequest
    model: ModelRef
    framework: FrameworkRef
    hardware: HardwareInfo
    device: str
    software: dict[str, str]
    settings: dict[str, object]
    trace_level: str
    trace_id: str | None
    trace_archive: str | None
    span_count: int
    queue_wait_seconds: float
    asset_sha256: str
    results: list[BatchResult]
    accuracy: Accuracy | None
    predictions: Predictions | None = None
    agent: dict[str, str] = {}
