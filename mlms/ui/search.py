"""The evaluations search: query parameters in, an ``EvaluationQuery`` for the client out.

The listing itself is the evaluation index's (``ListEvaluations``): filtered, sorted and paged
in SQL, so a page costs the same with ten records or a hundred thousand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from datetime import time as day_time

from pydantic import ValidationError

from mlms.errors import InvalidArgument
from mlms.evaluation.query import EvaluationQuery

_PARAMETERS = ("q", "model", "framework", "hardware", "precision", "task", "status", "sweep",
               "since", "until", "sort", "page_token")  # fmt: skip


@dataclass(frozen=True)
class Filters:
    """The search: words anywhere in a row, exact model, framework, precision, task and
    status, a --hw alias, a sweep, a range of days (UTC, both ends included), an order, a
    page."""

    text: str = ""
    model: str = ""
    framework: str = ""
    hardware: str = ""
    precision: str = ""
    task: str = ""
    status: str = ""
    sweep: str = ""
    since: date | None = None
    until: date | None = None
    sort: str = "-created"
    page_token: str = ""

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        """From query parameters; a bad one names itself and what was expected."""
        unknown = sorted(set(query) - set(_PARAMETERS))
        if unknown:
            raise InvalidArgument(
                f"unknown search parameter {unknown[0]!r}: expected one of {', '.join(_PARAMETERS)}"
            )
        text = {key: query.get(key, "").strip() for key in _PARAMETERS}
        return cls(
            text=text["q"],
            model=text["model"],
            framework=text["framework"],
            hardware=text["hardware"].lower(),
            precision=text["precision"],
            task=text["task"],
            status=text["status"],
            sweep=text["sweep"].lower(),
            since=_day("since", text["since"]),
            until=_day("until", text["until"]),
            sort=text["sort"] or "-created",
            page_token=text["page_token"],
        )

    def query(self, page_size: int) -> EvaluationQuery:
        try:
            return EvaluationQuery(
                model=self.model or None,
                framework=self.framework or None,
                hardware=self.hardware or None,
                precision=self.precision or None,
                task=self.task or None,
                status=self.status or None,
                sweep_id=self.sweep or None,
                since=datetime.combine(self.since, day_time.min, UTC) if self.since else None,
                until=datetime.combine(self.until, day_time.max, UTC) if self.until else None,
                text=self.text,
                sort=self.sort,
                page_size=page_size,
                page_token=self.page_token,
            )
        except ValidationError as exc:
            from mlms.reasons import one_line

            raise InvalidArgument(f"bad search: {one_line(exc)}") from None

    def parameters(self, **changed: str) -> dict[str, str]:
        """The query parameters of this search (for links to its next page)."""
        values = {
            "q": self.text, "model": self.model, "framework": self.framework,
            "hardware": self.hardware, "precision": self.precision, "task": self.task,
            "status": self.status, "sweep": self.sweep,
            "since": self.since.isoformat() if self.since else "",
            "until": self.until.isoformat() if self.until else "",
            "sort": "" if self.sort == "-created" else self.sort, "page_token": self.page_token,
            **changed,
        }  # fmt: skip
        return {key: value for key, value in values.items() if value}


def _day(name: str, text: str) -> date | None:
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"bad {name} date {text!r}: expected YYYY-MM-DD") from None
