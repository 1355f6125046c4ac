"""What LoadGen wrote: its summary text, and the results in its detail log (MLLOG lines)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mlms.errors import MlmsError

SUMMARY = "mlperf_log_summary.txt"
DETAIL = "mlperf_log_detail.txt"
_MLLOG = ":::MLLOG "

#: LoadGen's checks of a run, and what failing each means.
_CHECKS = {
    "result_min_duration_met": "the run was shorter than the minimum duration",
    "result_min_queries_met": "fewer queries than the minimum were answered",
    "early_stopping_met": "too few queries for early stopping to bound the percentile",
    "result_perf_constraints_met": "the latency percentile exceeded the target latency",
}


@dataclass(frozen=True)
class LoadgenResult:
    validity: str  # "VALID" or "INVALID"
    #: Every ``result_*`` value of the detail log, under its key without the prefix.
    results: dict[str, float | int | bool | str]
    invalid_because: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def latency_ns(self, percentile: str) -> float | None:
        """``percentile`` as LoadGen names it, e.g. "90.00"."""
        value = self.results.get(f"{percentile}_percentile_latency_ns")
        return None if value is None else float(value)


def read_result(log_dir: Path) -> LoadgenResult:
    entries = _entries(log_dir / DETAIL)
    values = {entry["key"]: entry.get("value") for entry in entries}
    if "result_validity" not in values:
        raise MlmsError(f"LoadGen's detail log {log_dir / DETAIL} has no result: the run broke off")
    checks = {key: values.get(key) for key in _CHECKS}
    return LoadgenResult(
        validity=str(values["result_validity"]),
        results={
            key.removeprefix("result_"): value
            for key, value in values.items()
            if key.startswith("result_")
        },
        invalid_because=[_CHECKS[key] for key, met in checks.items() if met is False],
        errors=[_text(e) for e in entries if e.get("metadata", {}).get("is_error")],
        warnings=[_text(e) for e in entries if e.get("metadata", {}).get("is_warning")],
    )


def summary_text(log_dir: Path) -> str:
    """LoadGen's own summary, up to its list of the settings it used (kept in the file)."""
    text = (log_dir / SUMMARY).read_text()
    head, _sep, _parameters = text.partition("Test Parameters Used")
    # The cut leaves the banner line that opened the parameters section.
    return head.rstrip().removesuffix("=" * 48).rstrip()


def _entries(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise MlmsError(f"LoadGen wrote no detail log at {path}") from None
    return [json.loads(line[len(_MLLOG) :]) for line in lines if line.startswith(_MLLOG)]


def _text(entry: dict) -> str:
    return f"{entry['key']}: {entry.get('value')}"
