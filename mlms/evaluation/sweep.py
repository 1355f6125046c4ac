"""A sweep: the cross product of models, frameworks, batch sizes and hardware as one
evaluation a cell, stored as ``sweeps/<id>.json`` so that it can be resumed.

Each cell's evaluation id is derived from the sweep's id and the cell, so asking for a cell
again (after the client, the server or an agent died) finds the evaluation that was already
stored or is still in flight, instead of running it a second time.
"""

from __future__ import annotations

import itertools
import re
import uuid
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from mlms.catalog.resolve import plausible_model
from mlms.errors import InvalidArgument, MlmsError
from mlms.evaluation.record import (
    MAX_ITERATIONS,
    MAX_SECONDS,
    MAX_TENSOR_PARALLEL,
    MAX_WARMUP,
    EvaluationRecord,
    EvaluationRequest,
    check_batch_sizes,
)
from mlms.frameworks import FRAMEWORKS
from mlms.hardware import GPU_ALIASES, parse_hw
from mlms.reasons import short
from mlms.store.base import ObjectStore
from mlms.store.json_records import JsonRecords

PREFIX = "sweeps/"
#: Cells of one sweep at most: each is an evaluation of seconds to minutes.
MAX_CELLS = 1024
_ID_PREFIX = re.compile(r"[0-9a-f]{1,32}")
_NAMESPACE = uuid.UUID("6f1b7f5e-3c55-4b55-9d1e-6d6c6d730001")

CellState = Literal["pending", "running", "completed", "failed"]


class SweepSpec(BaseModel):
    models: list[str] = Field(min_length=1, max_length=128)
    frameworks: list[str] = Field(min_length=1, max_length=8)
    batch_sizes: list[int]
    hw: list[str] = Field(min_length=1, max_length=16)
    iterations: int = Field(default=20, ge=1, le=MAX_ITERATIONS)
    warmup: int = Field(default=3, ge=0, le=MAX_WARMUP)
    min_seconds: float = Field(default=1.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    #: Every cell's model split over this many devices (``EvaluationRequest.tensor_parallel``).
    tensor_parallel: int = Field(default=1, ge=1, le=MAX_TENSOR_PARALLEL)

    @field_validator("batch_sizes")
    @classmethod
    def _sizes(cls, value: list[int]) -> list[int]:
        return check_batch_sizes(value)

    @field_validator("models", "frameworks", "hw")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"expected distinct names, got {short(value)}")
        return value

    @field_validator("models")
    @classmethod
    def _known_models(cls, value: list[str]) -> list[str]:
        for name in value:
            # Models added to a store are found where the sweep runs (its cells say so).
            if not plausible_model(name):
                raise ValueError(
                    f"unknown model {short(name)}; run 'mlms models' for the list"
                ) from None
        return value

    @field_validator("frameworks")
    @classmethod
    def _known_frameworks(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in FRAMEWORKS]
        if unknown:
            raise ValueError(
                f"unknown framework {short(unknown[0])}: expected some of {', '.join(FRAMEWORKS)}"
            )
        return value

    @field_validator("hw")
    @classmethod
    def _known_hardware(cls, value: list[str]) -> list[str]:
        known = ["cpu", *GPU_ALIASES]
        unknown = [hw for hw in value if not _plausible_hw(hw, known)]
        if unknown:
            raise ValueError(
                f"unknown hardware {short(unknown[0])}: expected cpu or a GPU alias, alone or "
                "with one GPU index (h100:1)"
            )
        return [re.sub(r"\s+", "", hw).lower() for hw in value]


class SweepCell(BaseModel):
    model: str
    framework: str
    batch_size: int
    hw: str
    evaluation_id: str
    state: CellState = "pending"
    agent_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    p50_ms: float | None = None
    throughput: float | None = None
    joules_per_inference: float | None = None

    def request(self, spec: SweepSpec) -> EvaluationRequest:
        return EvaluationRequest(
            model=self.model,
            framework=self.framework,
            hw=self.hw,
            batch_sizes=[self.batch_size],
            iterations=spec.iterations,
            warmup=spec.warmup,
            min_seconds=spec.min_seconds,
            tensor_parallel=spec.tensor_parallel,
        )

    def describe(self) -> str:
        return f"{self.model} on {self.framework}, batch {self.batch_size}, {self.hw}"

    def completed(self, record: EvaluationRecord) -> SweepCell:
        result = record.results[0]
        return self.model_copy(
            update={
                "state": "completed",
                "finished_at": self.finished_at or datetime.now(UTC),
                "agent_id": record.agent.get("agent_id", self.agent_id),
                "error": None,
                "p50_ms": result.latency_ms.p50,
                "throughput": result.throughput,
                "joules_per_inference": result.energy and result.energy.joules_per_inference,
            }
        )


class SweepState(BaseModel):
    id: str
    created_at: datetime
    spec: SweepSpec
    cells: list[SweepCell]

    @property
    def finished(self) -> bool:
        return all(cell.state in ("completed", "failed") for cell in self.cells)

    def count(self, state: CellState) -> int:
        return sum(cell.state == state for cell in self.cells)


def new_sweep(spec: SweepSpec) -> SweepState:
    """The sweep's cells, models outermost, each with its evaluation id; pending."""
    sweep_id = uuid.uuid4().hex
    keys = list(itertools.product(spec.models, spec.frameworks, spec.batch_sizes, spec.hw))
    if len(keys) > MAX_CELLS:
        raise InvalidArgument(
            f"a sweep of {len(keys)} evaluations: expected at most {MAX_CELLS}; split it"
        )
    cells = [
        SweepCell(
            model=model,
            framework=framework,
            batch_size=size,
            hw=hw,
            evaluation_id=uuid.uuid5(_NAMESPACE, f"{sweep_id}/{model}/{framework}/{size}/{hw}").hex,
        )
        for model, framework, size, hw in keys
    ]
    return SweepState(id=sweep_id, created_at=datetime.now(UTC), spec=spec, cells=cells)


_SWEEPS = JsonRecords(PREFIX, SweepState, "sweep")


def save_sweep(store: ObjectStore, sweep: SweepState) -> None:
    _SWEEPS.save(store, sweep)


def load_sweep(store: ObjectStore, sweep_id: str) -> SweepState:
    """By full id or a unique prefix of one."""
    if not _ID_PREFIX.fullmatch(sweep_id):
        raise InvalidArgument(
            f"sweep id {sweep_id!r}: expected hex digits (a full id or a unique prefix of one), "
            "as 'mlms sweep' printed it"
        )
    return _SWEEPS.load(store, sweep_id)


def _plausible_hw(hw: str, known: list[str]) -> bool:
    """A known alias, alone or with one GPU index (``h100:1``)."""
    try:
        alias, indices = parse_hw(hw)
    except MlmsError:
        return False
    return alias in known and (indices is None or len(indices) == 1)
