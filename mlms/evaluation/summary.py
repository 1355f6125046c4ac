"""What a listing shows of an evaluation: one row per record, from its queryable fields."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from mlms.evaluation.record import EvaluationRecord
    from mlms.registry.hardware import GpuInfo


def gpu_of(record: EvaluationRecord) -> GpuInfo | None:
    """The GPU a ``cuda:N`` evaluation ran on (None on the CPU)."""
    if not record.device.startswith("cuda"):
        return None
    index = int(record.device.partition(":")[2] or 0)
    return next((g for g in record.hardware.gpus if g.index == index), None)


def device_name(record: EvaluationRecord) -> str:
    """``cpu`` or the GPU's name for a ``cuda:N`` device."""
    gpu = gpu_of(record)
    return gpu.name if gpu else record.device


class EvaluationSummary(BaseModel):
    """One evaluation in a listing (``ListEvaluations``, ``mlms evals``, the web UI)."""

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: datetime
    status: Literal["completed", "failed"]
    model: str
    model_version: str
    framework: str
    framework_version: str
    #: The ``--hw`` alias asked for: "cpu", "h100", ...
    hw: str
    #: The device's name: the GPU's ("NVIDIA H100 80GB HBM3") or "cpu".
    hardware: str
    device: str
    precision: str
    compile: str | None = None
    trace_level: str
    trace_id: str | None = None
    batch_sizes: list[int]
    #: At the first batch size.
    p50_ms: float | None = None
    #: Inputs per second at the first batch size.
    throughput: float | None = None
    accuracy_top1: float | None = None
    #: Where it ran: the agent's address, or "embedded".
    agent: str = ""
    #: What changes what runs (``EvaluationRequest.options``), for a listing.
    options: str = ""

    @classmethod
    def of(cls, record: EvaluationRecord) -> EvaluationSummary:
        first = record.results[0] if record.results else None
        # From a validated record: its fields hold the types already (no second validation,
        # which the index's rebuild would pay once per record).
        return cls.model_construct(
            id=record.id,
            created_at=record.created_at,
            status=record.status,
            model=record.model.name,
            model_version=record.model.version,
            framework=record.framework.name,
            framework_version=record.framework.version,
            hw=record.request.hw.lower(),
            hardware=device_name(record),
            device=record.device,
            precision=record.request.precision,
            compile=record.request.compile,
            trace_level=record.trace_level,
            trace_id=record.trace_id,
            batch_sizes=[r.batch_size for r in record.results],
            p50_ms=first.latency_ms.p50 if first else None,
            throughput=first.throughput if first else None,
            accuracy_top1=record.accuracy.top1 if record.accuracy else None,
            agent=record.agent.get("address") or record.agent.get("mode", ""),
            options=record.request.options(),
        )

    @property
    def hardware_label(self) -> str:
        """The alias and the device's name: "cpu", "h100 NVIDIA H100 80GB HBM3"."""
        return self.hw if self.hardware == self.hw else f"{self.hw} {self.hardware}"
