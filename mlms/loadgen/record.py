"""The mlms record of a load run, stored as ``loadgen/<id>/record.json`` beside LoadGen's logs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
from pydantic import BaseModel, Field

from mlms.store.base import ObjectStore

PREFIX = "loadgen"


class Latencies(BaseModel):
    """mlms's own clock over the same samples LoadGen timed."""

    samples: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float

    @classmethod
    def of(cls, latencies_ns: Sequence[int]) -> Latencies:
        ms = np.sort(np.asarray(latencies_ns, dtype=np.float64)) / 1e6
        return cls(
            samples=len(ms),
            p50_ms=order_statistic(ms, 0.50),
            p90_ms=order_statistic(ms, 0.90),
            p99_ms=order_statistic(ms, 0.99),
            mean_ms=float(ms.mean()),
        )


def order_statistic(ordered: np.ndarray, quantile: float) -> float:
    """The percentile as LoadGen takes it: the sample at index floor(n * q), no interpolation.
    Interpolating would differ from LoadGen's where latencies jump (a slow mode above 90%)."""
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * quantile))])


class CurvePoint(BaseModel):
    """One concurrency level of a sweep, over its last (stable) windows."""

    concurrency: int
    throughput_per_s: float  # samples answered per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    windows: int  # measured until stable, or until the most allowed
    stable: bool


class LoadRecord(BaseModel):
    id: str
    created_at: datetime
    model: str
    framework: str
    framework_version: str
    device: str
    where: str  # "embedded" or "server HOST:PORT"
    #: The model split over this many ranks (``mlms.loadgen.split``), on ``devices``, rank by
    #: rank; one process: 1 and none.
    tensor_parallel: int = 1
    devices: list[str] = Field(default_factory=list)
    #: A LoadGen scenario, or "concurrency" for a closed-loop sweep.
    scenario: str
    #: What the run was given and derived (LoadGen's settings, workers, windows, ...).
    settings: dict[str, float | int | str | None]
    calibration_ms: float | None = None
    validity: str | None = None  # LoadGen's VALID / INVALID
    invalid_because: list[str] = Field(default_factory=list)
    loadgen: dict[str, float | int | bool | str] = Field(default_factory=dict)
    mlms: Latencies | None = None
    #: LoadGen's p90 over mlms's p90 for the same samples (a check on both clocks).
    p90_ratio: float | None = None
    curve: list[CurvePoint] = Field(default_factory=list)
    #: Store keys of LoadGen's own log files.
    logs: list[str] = Field(default_factory=list)


def record_key(run_id: str) -> str:
    return f"{PREFIX}/{run_id}/record.json"


def save_record(store: ObjectStore, record: LoadRecord) -> str:
    key = record_key(record.id)
    store.put_bytes(key, record.model_dump_json(indent=2).encode())
    return key
