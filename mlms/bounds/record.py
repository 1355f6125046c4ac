"""The bound request and record (stored as ``bounds/<id>.json``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlms.evaluation.precisions import check_precisions
from mlms.evaluation.record import MAX_ITERATIONS, MAX_SECONDS, check_batch_sizes
from mlms.hardware import HardwareInfo
from mlms.store.base import ObjectStore
from mlms.store.json_records import JsonRecords

PREFIX = "bounds/"


class BoundRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    #: The framework whose measured latency the bound is set against.
    framework: str | None = None
    hw: str = "cpu"
    batch_sizes: list[int] = Field(default_factory=lambda: [1])
    #: Precisions the layer benchmarks run convolutions and GEMMs at; None: every one the
    #: device has (fp32 only on a CPU).
    precisions: list[str] | None = None
    #: The precision the model runs at in the measured evaluation (``mlms eval``'s), and so
    #: every layer in its bound: fp32 (strict on a GPU), tf32, or a half precision, in which
    #: the layers other than convolutions and GEMMs are benchmarked too.
    model_precision: str = "fp32"
    #: Timed samples of each layer implementation (on a GPU, four calls back to back each).
    repeats: int = Field(default=20, ge=3, le=10_000)
    #: The measured evaluation's iterations and minimum time.
    iterations: int = Field(default=20, ge=1, le=MAX_ITERATIONS)
    min_seconds: float = Field(default=1.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)

    @field_validator("batch_sizes")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        return check_batch_sizes(value)

    @field_validator("precisions")
    @classmethod
    def _known(cls, value: list[str] | None) -> list[str] | None:
        return check_precisions(value)

    @field_validator("model_precision")
    @classmethod
    def _one_known(cls, value: str) -> str:
        check_precisions([value])
        return value


class LayerBound(BaseModel):
    """One layer of the model at one batch size: its bound beside what was measured."""

    name: str
    node: str
    kind: str
    op: str
    input_shapes: list[list[int]]
    output_shape: list[int]
    config: str
    #: The framework's own implementation, alone, at the framework's precision.
    framework_ms: float | None
    #: The fastest implementation at the framework's precision: the layer's lower bound.
    bound_ms: float
    bound_variant: str
    #: The fastest at any precision the benchmarks ran (tensor cores).
    any_precision_ms: float
    any_precision_variant: str
    #: The layer's kernel time per predict in the evaluation (GPU), or its latency (CPU).
    measured_ms: float | None = None
    on_critical_path: bool = False


class WhatIf(BaseModel):
    """Latency now, and latency if one optimisation were made (Benanza's what-if analyses)."""

    name: str
    now_ms: float
    if_ms: float
    detail: str

    @property
    def speedup(self) -> float:
        return self.now_ms / self.if_ms if self.if_ms > 0 else float("inf")


class BatchBound(BaseModel):
    batch_size: int
    evaluation_id: str
    #: The model-level latency of the evaluation (p50, no profiler attached).
    measured_ms: float
    #: Kernel time per predict in the evaluation's hardware-level run (GPU only).
    kernel_ms: float | None
    #: That run's predict (p50), which the kernels' and the layers' times were read from: its
    #: ratio to ``measured_ms`` is what observing them cost (GPU only).
    traced_ms: float | None = None
    sequential_ms: float  # sum over layers of their bounds
    parallel_ms: float  # the critical path through the layer graph, weighted by the bounds
    what_ifs: list[WhatIf]
    layers: list[LayerBound]

    @property
    def ratio(self) -> float:
        """Benanza's ratio: sequential lower bound over measured latency (1 is optimal)."""
        return self.sequential_ms / self.measured_ms

    @property
    def parallel_ratio(self) -> float:
        return self.parallel_ms / self.measured_ms


class BoundRecord(BaseModel):
    id: str
    created_at: datetime
    request: BoundRequest
    model: str
    framework: str
    framework_version: str
    hardware: HardwareInfo
    device: str
    device_name: str
    libraries: dict[str, str]
    precisions: list[str]
    #: The precision each layer kind runs at in the framework (what the bound is computed at).
    framework_precisions: dict[str, str]
    #: Layer configurations benchmarked now, and found in the perfdb.
    benchmarked: int
    cached: int
    bench_seconds: float
    batches: list[BatchBound]


_RECORDS = JsonRecords(PREFIX, BoundRecord, "bound")


def save_bound(store: ObjectStore, record: BoundRecord) -> str:
    return _RECORDS.save(store, record)


def list_bounds(store: ObjectStore) -> list[BoundRecord]:
    return _RECORDS.all(store)
