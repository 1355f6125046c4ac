"""What a caller asks of the evaluation index: filters, an order, a page; and the named views
(aggregations) over it. Plain types: the database implements them, the wire carries them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlms.evaluation.headline import TASKS
from mlms.evaluation.precisions import PRECISIONS
from mlms.evaluation.query_terms import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, SORT_KEYS
from mlms.evaluation.summary import EvaluationSummary

_SWEEP_ID = re.compile(r"[0-9a-f]{32}")


class EvaluationQuery(BaseModel):
    """Filters (all given must hold), the order and one page of a listing. ``text``: words
    that must each appear in the evaluation's id, model, framework, hardware, device, trace
    level, status or agent (case does not matter)."""

    model_config = ConfigDict(frozen=True)

    model: str | None = None
    framework: str | None = None
    #: A ``--hw`` alias: cpu, h100, a100, ...
    hardware: str | None = None
    precision: str | None = None
    #: A data set's task: only evaluations that measured accuracy on one of this task.
    task: str | None = None
    status: Literal["completed", "failed"] | None = None
    since: datetime | None = None
    until: datetime | None = None
    sweep_id: str | None = None
    text: str = ""
    sort: str = "-created"
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)
    #: From the previous page's answer; empty: the first page.
    page_token: str = ""

    @field_validator("model", "framework", "hardware", "text", mode="after")
    @classmethod
    def _trimmed(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if len(value) > 256:
            raise ValueError(f"{value[:40]!r}...: expected at most 256 characters")
        if "\x00" in value:
            raise ValueError(f"{value[:40]!r}: expected text without NUL characters")
        return value

    @field_validator("hardware", mode="after")
    @classmethod
    def _alias(cls, value: str | None) -> str | None:
        return value.lower() if value else None

    @field_validator("precision")
    @classmethod
    def _precision(cls, value: str | None) -> str | None:
        return _one_of("precision", value, PRECISIONS)

    @field_validator("task")
    @classmethod
    def _task(cls, value: str | None) -> str | None:
        return _one_of("task", value, TASKS)

    @field_validator("sweep_id")
    @classmethod
    def _sweep(cls, value: str | None) -> str | None:
        if value is not None and not _SWEEP_ID.fullmatch(value):
            raise ValueError(f"sweep id {value[:40]!r}: expected 32 hex digits")
        return value

    @field_validator("sort")
    @classmethod
    def _sort(cls, value: str) -> str:
        if value.removeprefix("-") not in SORT_KEYS:
            keys = ", ".join(SORT_KEYS)
            raise ValueError(
                f"sort {value!r}: expected one of {keys}, each with '-' for descending"
            )
        return value

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @model_validator(mode="after")
    def _range(self) -> EvaluationQuery:
        if self.since and self.until and self.since > self.until:
            raise ValueError(
                f"since {self.since.isoformat()} is after until {self.until.isoformat()}: "
                "expected since <= until"
            )
        return self

    def words(self) -> list[str]:
        return self.text.lower().split()

    def fingerprint(self) -> str:
        """What a page token belongs to: the filters and the order (a token is refused with
        others)."""
        kept = self.model_dump(mode="json", exclude={"page_size", "page_token"})
        return hashlib.sha256(repr(sorted(kept.items())).encode()).hexdigest()[:16]


class EvaluationPage(BaseModel):
    """One page of a listing, in the query's order."""

    summaries: list[EvaluationSummary]
    #: Evaluations matching the filters, on every page.
    total: int
    #: For the next page; empty on the last.
    next_page_token: str = ""


class P50Row(BaseModel):
    """A row of a named view: the p50 at one batch size of a model on one hardware, over the
    evaluations in its group (completed ones only)."""

    model: str
    hw: str
    framework: str
    framework_version: str
    batch_size: int
    #: The group's lowest p50, and the evaluation that measured it.
    p50_ms: float
    evaluation_id: str
    #: Evaluations in the group.
    evaluations: int
    #: The group's mean p50.
    mean_p50_ms: float
    #: When the group's newest evaluation was made.
    latest: datetime


def _one_of(name: str, value: str | None, known: Sequence[str]) -> str | None:
    if value is not None and value not in known:
        raise ValueError(f"{name} {value[:40]!r}: expected one of {', '.join(known)}")
    return value
