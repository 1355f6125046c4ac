"""A sweep: the cross product of models, frameworks, precisions, batch sizes and hardware,
stored as ``sweeps/<id>.json`` so that it can be resumed.

The cells of one model, framework, precision and hardware form a group evaluated as one
evaluation over their batch sizes (``CellGroup``): the model loads once for all of them, and
each cell takes its batch size's result. A group's evaluation id is derived from the sweep's id
and the cells it covers, so asking for them again (after the client, the server or an agent
died) finds the evaluation that was already stored or is still in flight, instead of running it
a second time.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from mlms.catalog.resolve import plausible_model
from mlms.errors import InvalidArgument, MlmsError
from mlms.evaluation.precisions import PRECISIONS, check_precisions
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
#: Cells of one sweep at most: each is a batch size's run of seconds to minutes.
MAX_CELLS = 1024
_ID_PREFIX = re.compile(r"[0-9a-f]{1,32}")
_NAMESPACE = uuid.UUID("6f1b7f5e-3c55-4b55-9d1e-6d6c6d730001")

CellState = Literal["pending", "running", "completed", "failed"]

#: What a sweep that names no precision runs, and what a cell stored before sweeps had
#: precisions ran: the evaluation's default.
DEFAULT_PRECISION: str = EvaluationRequest.model_fields["precision"].default


class SweepSpec(BaseModel):
    models: list[str] = Field(min_length=1, max_length=128)
    frameworks: list[str] = Field(min_length=1, max_length=8)
    batch_sizes: list[int]
    hw: list[str] = Field(min_length=1, max_length=16)
    #: Every cell's numeric precision (``EvaluationRequest.precision``), one axis of the sweep.
    precisions: list[str] = Field(
        default_factory=lambda: [DEFAULT_PRECISION], max_length=len(PRECISIONS)
    )
    iterations: int = Field(default=20, ge=1, le=MAX_ITERATIONS)
    warmup: int = Field(default=3, ge=0, le=MAX_WARMUP)
    min_seconds: float = Field(default=1.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    #: Every cell's model split over this many devices (``EvaluationRequest.tensor_parallel``).
    tensor_parallel: int = Field(default=1, ge=1, le=MAX_TENSOR_PARALLEL)
    #: Every cell with cuDNN's autotuning (``EvaluationRequest.cudnn_benchmark``).
    cudnn_benchmark: bool = False

    @field_validator("batch_sizes")
    @classmethod
    def _sizes(cls, value: list[int]) -> list[int]:
        return check_batch_sizes(value)

    @field_validator("precisions")
    @classmethod
    def _known_precisions(cls, value: list[str]) -> list[str]:
        check_precisions(value)
        return value

    @field_validator("models", "frameworks", "hw", "precisions")
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
    precision: str = DEFAULT_PRECISION
    batch_size: int
    hw: str
    #: The evaluation that holds (or will hold) the cell's result: its group's, shared with the
    #: cells of the same model, framework, precision and hardware (``CellGroup``).
    evaluation_id: str
    state: CellState = "pending"
    agent_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    p50_ms: float | None = None
    throughput: float | None = None
    joules_per_inference: float | None = None

    @property
    def group_key(self) -> tuple[str, str, str, str]:
        """What the cells evaluated together share: one model load on one device."""
        return self.model, self.framework, self.precision, self.hw

    def describe(self) -> str:
        return (
            f"{self.model} on {self.framework} {self.precision}, batch {self.batch_size}, {self.hw}"
        )

    def completed(self, record: EvaluationRecord) -> SweepCell:
        """The cell filled from its batch size's result in ``record`` (its group's evaluation)."""
        result = next((r for r in record.results if r.batch_size == self.batch_size), None)
        if result is None:
            raise MlmsError(f"evaluation {record.id} holds no result for batch {self.batch_size}")
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


@dataclass(frozen=True)
class CellGroup:
    """Cells of one model, framework, precision and hardware run as one evaluation over their
    batch sizes: the model loads once for all of them."""

    #: The cells' places in ``SweepState.cells``, in the sweep's order.
    indices: tuple[int, ...]
    evaluation_id: str
    request: EvaluationRequest

    def describe(self) -> str:
        sizes = ",".join(map(str, self.request.batch_sizes))
        return (
            f"{self.request.model} on {self.request.framework} {self.request.precision}, "
            f"batch {sizes}, {self.request.hw}"
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

    def groups(self) -> list[tuple[int, ...]]:
        """The cells not completed, grouped by what they share (``SweepCell.group_key``), in
        the order of each group's first cell."""
        groups: dict[tuple[str, str, str, str], list[int]] = {}
        for index, cell in enumerate(self.cells):
            if cell.state != "completed":
                groups.setdefault(cell.group_key, []).append(index)
        return [tuple(indices) for indices in groups.values()]

    def group(self, indices: Sequence[int]) -> CellGroup:
        """One evaluation of these cells (of one group), its id derived from the sweep's id
        and what it covers."""
        cells = [self.cells[index] for index in indices]
        first = cells[0]
        sizes = [cell.batch_size for cell in cells]
        key = f"{self.id}/{first.model}/{first.framework}/{','.join(map(str, sizes))}/{first.hw}"
        # A cell alone at the default precision keeps the id a cell had before sweeps grouped
        # cells or had precisions: a sweep stored then resumes onto its stored and in-flight
        # evaluations.
        if first.precision != DEFAULT_PRECISION:
            key += f"/{first.precision}"
        request = EvaluationRequest(
            model=first.model,
            framework=first.framework,
            hw=first.hw,
            precision=first.precision,
            batch_sizes=sizes,
            iterations=self.spec.iterations,
            warmup=self.spec.warmup,
            min_seconds=self.spec.min_seconds,
            tensor_parallel=self.spec.tensor_parallel,
            cudnn_benchmark=self.spec.cudnn_benchmark,
        )
        return CellGroup(tuple(indices), uuid.uuid5(_NAMESPACE, key).hex, request)

    def with_groups(self, groups: Sequence[Sequence[int]]) -> SweepState:
        """Each cell of ``groups`` naming its group's evaluation."""
        cells = list(self.cells)
        for indices in groups:
            evaluation_id = self.group(indices).evaluation_id
            for index in indices:
                cells[index] = cells[index].model_copy(update={"evaluation_id": evaluation_id})
        return self.model_copy(update={"cells": cells})

    def evaluation_ids(self) -> list[str]:
        """Every evaluation the cells may be in: each one's group's, and its own (a group whose
        evaluation failed runs its cells one by one)."""
        alone = [self.group([index]).evaluation_id for index in range(len(self.cells))]
        return list(dict.fromkeys([*(cell.evaluation_id for cell in self.cells), *alone]))


def new_sweep(spec: SweepSpec) -> SweepState:
    """The sweep's cells, models outermost, each naming its group's evaluation; pending."""
    keys = list(
        itertools.product(spec.models, spec.frameworks, spec.precisions, spec.batch_sizes, spec.hw)
    )
    if len(keys) > MAX_CELLS:
        raise InvalidArgument(
            f"a sweep of {len(keys)} cells: expected at most {MAX_CELLS}; split it"
        )
    cells = [
        SweepCell(
            model=model,
            framework=framework,
            precision=precision,
            batch_size=size,
            hw=hw,
            evaluation_id="",
        )
        for model, framework, precision, size, hw in keys
    ]
    sweep = SweepState(id=uuid.uuid4().hex, created_at=datetime.now(UTC), spec=spec, cells=cells)
    return sweep.with_groups(sweep.groups())


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
