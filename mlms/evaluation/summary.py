"""What a listing shows of an evaluation: one row per record, from its queryable fields."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from mlms.evaluation.headline import HEADLINES, headline_text
from mlms.hardware import hw_alias

if TYPE_CHECKING:
    from mlms.evaluation.record import EvaluationRecord
    from mlms.hardware import GpuInfo


def gpus_used(record: EvaluationRecord) -> list[GpuInfo]:
    """The GPUs an evaluation ran on: the record's ``gpus``; for a record from before that
    field, the GPU its ``cuda:N`` device numbers among the host's (CUDA's numbers were NVML's
    then, unless ``CUDA_VISIBLE_DEVICES`` said otherwise)."""
    if record.gpus:
        return list(record.gpus)
    if not record.device.startswith("cuda"):
        return []
    index = int(record.device.partition(":")[2] or 0)
    return [g for g in record.hardware.gpus if g.index == index][:1]


def gpu_of(record: EvaluationRecord) -> GpuInfo | None:
    """The (first) GPU an evaluation ran on (None on the CPU)."""
    return next(iter(gpus_used(record)), None)


def device_name(record: EvaluationRecord) -> str:
    """``cpu`` or the name of the GPU it ran on."""
    gpu = gpu_of(record)
    return gpu.name if gpu else record.device


def gpu_label(record: EvaluationRecord) -> str:
    """Where it ran, for headers and listings: ``cpu``, ``GPU 1 NVIDIA H100 80GB HBM3``,
    ``GPUs 0,1 NVIDIA H100 80GB HBM3``."""
    gpus = gpus_used(record)
    if not gpus:
        return record.device
    names = list(dict.fromkeys(g.name for g in gpus))
    indices = ",".join(str(g.index) for g in gpus)
    return f"GPU{'s' * (len(gpus) > 1)} {indices} {' + '.join(names)}"


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
    #: The ``--hw`` alias asked for, without GPU indices: "cpu", "h100", ...
    hw: str
    #: Where it ran: "cpu", or the GPU's index and name ("GPU 1 NVIDIA H100 80GB HBM3").
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
    #: A classifier's top-1 (beside the headline, for clients that know only this one).
    accuracy_top1: float | None = None
    #: With a data set: its task, and its headline metric's name and value
    #: (``Accuracy.headline``; the value unset where the pass gave none).
    task: str | None = None
    accuracy_metric: str | None = None
    accuracy_value: float | None = None
    #: Where it ran: the agent's address, or "embedded".
    agent: str = ""
    #: What changes what runs (``EvaluationRequest.options``), for a listing.
    options: str = ""

    @classmethod
    def of(cls, record: EvaluationRecord) -> EvaluationSummary:
        first = record.results[0] if record.results else None
        accuracy = record.accuracy
        metric, value = accuracy.headline if accuracy else (None, None)
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
            hw=hw_alias(record.request.hw),
            hardware=gpu_label(record),
            device=record.device,
            precision=record.request.precision,
            compile=record.request.compile,
            trace_level=record.trace_level,
            trace_id=record.trace_id,
            batch_sizes=[r.batch_size for r in record.results],
            p50_ms=first.latency_ms.p50 if first else None,
            throughput=first.throughput if first else None,
            accuracy_top1=accuracy.top1 if accuracy else None,
            task=accuracy.task if accuracy else None,
            accuracy_metric=metric,
            accuracy_value=value,
            agent=record.agent.get("address") or record.agent.get("mode", ""),
            options=record.request.options(),
        )

    @property
    def accuracy_line(self) -> str:
        """The headline as ``mlms eval`` prints it (``top-1 0.7610``, ``mAP@[.5:.95] 0.3720``),
        a server that sends only top-1's included; empty without a data set."""
        if self.accuracy_metric is not None:
            return headline_text(self.accuracy_metric, self.accuracy_value)
        if self.accuracy_top1 is not None:
            return headline_text(HEADLINES["classification"].name, self.accuracy_top1)
        return ""

    @property
    def hardware_label(self) -> str:
        """The alias and where it ran: "cpu", "h100 GPU 1 NVIDIA H100 80GB HBM3"."""
        return self.hw if self.hardware == self.hw else f"{self.hw} {self.hardware}"
